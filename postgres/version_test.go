package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestVersionTryTakesNoRowLock: a TryAcquire of a held name the Locker
// has used before neither takes nor waits for the row's lock (the plain
// UPDATE of a known name; INSERT … ON CONFLICT DO UPDATE locks the row it
// finds before its WHERE fails, and so waits here for the transaction
// that holds the row's lock, and costs every failed try of a contended
// name a lock written to the WAL).
func TestVersionTryTakesNoRowLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := versionURL(t)
	holder, other := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	name := queuedName("trynolock")
	ls, err := holder.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(context.Background())
	// other's first attempt finds the row.
	if _, err := other.TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("first try of a held name: %v, want ErrNotAcquired", err)
	}
	c, err := pgx.Connect(ctx, testenv.Postgres(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+sqltest.Core(other).Table().Q+" WHERE name = $1 FOR UPDATE", name); err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 3*time.Second)
	defer tcancel()
	if _, err := other.TryAcquire(tctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("try of a held name while another transaction holds its row's lock: %v, want ErrNotAcquired at once", err)
	}
}

// TestVersionContendedQueuesAtOnce: a blocking Acquire of a name its
// Locker found held at its last Acquire queues in one round trip (the
// wait's statement, which takes a free lease too), without the try
// first (a statement and a round trip more per contended grant).
func TestVersionContendedQueuesAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := versionURL(t)
	holder, op := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	waiter, f := countedLocker(t, "version")
	name := queuedName("queueatonce")
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	for round := range 4 { // round 0 tries first and prepares the statements
		ls, err := holder.Acquire(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		r0, _ := f.Count()
		got := acquireAsync(t, ctx, waiter, name, opts)
		awaitWaiters(t, ctx, op, name, 1)
		r1, _ := f.Count()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := within(t, got, 5*time.Second, "the queued waiter").Release(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d round trips to queue", round, r1-r0)
		if round > 1 && r1-r0 != 1 {
			t.Errorf("round %d: a blocking Acquire of a name held at its last Acquire took %d round trips to queue, want 1", round, r1-r0)
		}
	}
	// Free now: the wait's statement takes it, and the next Acquires
	// try first again; each takes one round trip and its release one
	// (the first rounds may prepare statements on the pool's second
	// connection).
	for round := range 5 {
		r0, _ := f.Count()
		ls, err := waiter.Acquire(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if r1, _ := f.Count(); round > 2 && r1-r0 != 2 {
			t.Errorf("free round %d: an Acquire+Release of a free name took %d round trips, want 2", round, r1-r0)
		}
	}
}
