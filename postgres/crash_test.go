package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestForUpdateTokenAfterCrash: forupdate's token is taken in the lease's
// open transaction and never flushed (the release rolls back), so a crash
// of the server (kill -9) can set the sequence back before it. The next
// grant after the crash must still get a larger token: the crash empties
// the UNLOGGED marker, and the next acquire moves the sequence on before
// it takes a token. The WAL writer is slowed down so that the first
// grant's sequence advance is surely not on disk at the crash.
func TestForUpdateTokenAfterCrash(t *testing.T) {
	srv := testenv.NewPostgres(t, &testenv.PGOptions{Durable: true, Config: []string{"wal_writer_delay=10s", "wal_writer_flush_after=0"}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	opts := &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true}
	// Even rounds take the second grant through the Locker of the
	// first, which finds the marker missing when it acquires (after its
	// broken connections are replaced); odd rounds through a new Locker,
	// which recovers when it first reaches the server.
	l := sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", "forupdate"))
	for round := range 4 {
		a, err := l.TryAcquire(ctx, "crash", opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if round%2 == 1 {
			l.Close()
			l = sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", "forupdate"))
		}
		var b *dlock.Lease
		for try := 0; b == nil; try++ {
			if b, err = l.TryAcquire(ctx, "crash", opts); err != nil && try == 10 {
				t.Fatalf("round %d: after the restart: %v", round, err)
			}
		}
		if b.Token() <= a.Token() {
			t.Fatalf("round %d: token %d after a kill -9 of the server, %d before it: the token went back", round, b.Token(), a.Token())
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
}
