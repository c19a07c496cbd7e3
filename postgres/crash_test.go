package postgres_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestForUpdateTokenAfterCrash: a kill -9 of the server between two grants
// never makes the token go back (sqltest.TokenAfterCrash). The WAL writer
// is slowed down so that the first grant's sequence advance is surely not
// on disk at the crash; the crash empties the UNLOGGED marker.
func TestForUpdateTokenAfterCrash(t *testing.T) {
	srv := testenv.NewPostgres(t, &testenv.PGOptions{Durable: true, Config: []string{"wal_writer_delay=10s", "wal_writer_flush_after=0"}})
	sqltest.TokenAfterCrash(t, srv)
}

// TestSemaphoreTokensAfterCrash: a permit granted after a kill -9 of the
// server has a larger token than one granted before it, on every strategy
// (sqltest.SemTokensAfterRestart).
func TestSemaphoreTokensAfterCrash(t *testing.T) {
	srv := testenv.NewPostgres(t, &testenv.PGOptions{Durable: true, Config: []string{"wal_writer_delay=10s", "wal_writer_flush_after=0"}})
	sqltest.SemTokensAfterRestart(t, srv, "advisory")
}
