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
