package postgres_test

import (
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	_ "github.com/dlock-go/dlock/postgres"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func TestBasic(t *testing.T) {
	srv := testenv.Postgres(t)
	for _, s := range sqltest.Strategies("advisory") {
		t.Run(s, func(t *testing.T) { sqltest.Basic(t, sqltest.WithParams(srv.URL, "strategy", s)) })
	}
}

func TestConformance(t *testing.T) {
	srv := testenv.Postgres(t)
	// A 1s TTL: with 500ms, under -race, the first winner of 100
	// concurrent TryAcquires on fresh connections can expire (for real,
	// on the server) before the last of them has connected.
	sqltest.Conformance(t, srv.URL, srv.Addr, sqltest.Strategies("advisory"), conformance.WithTTL(time.Second))
}
