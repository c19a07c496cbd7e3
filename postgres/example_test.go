package postgres_test

import (
	"context"
	"errors"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/postgres"
)

// Open by URL: the strategy is a parameter.
func Example() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "postgres://app:secret@127.0.0.1:5432/app?sslmode=disable&strategy=advisory")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	lease, err := l.Acquire(ctx, "invoices/2026-11", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// ... work while lease.Done() is open ...
}

// A Locker on the application's own pool, and a fenced write to the
// application's table: a holder that lost the lock while paused cannot
// overwrite its successor's work.
func ExampleFencedUpdate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app:secret@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	l, err := postgres.OpenLocker(pool, &postgres.Options{Strategy: "forupdate"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	// Each debit under the account's lock, fenced by the lease's token.
	debit := func(ctx context.Context, lease *dlock.Lease) error {
		ok, err := postgres.FencedUpdate(ctx, pool, "accounts", "fence", lease.Token(),
			"balance = balance - $1", "id = $2", 100, 7)
		if err == nil && !ok {
			err = errors.New("stale token: a newer holder has written since")
		}
		return err
	}
	if err := dlock.Do(ctx, l, "account/7", nil, debit); err != nil {
		log.Print(err)
	}
}
