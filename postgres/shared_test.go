package postgres_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestSharedSessions: advisory leases share sessions, on pools of 8.
func TestSharedSessions(t *testing.T) {
	srv := testenv.Postgres(t)
	url := sqltest.WithParams(srv.URL, "strategy", "advisory", "pool_max_conns", "8", "table", "shared_sessions")
	l, other, admin := sqltest.Open(t, t.Context(), url), sqltest.Open(t, t.Context(), url), sqltest.Open(t, t.Context(), url)
	sqltest.SharedSessions(t, l, other, admin, 8)
}
