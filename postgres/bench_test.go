package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// floors are the hand-written locks on one connection that a strategy
// is compared with: BEGIN; SELECT … FOR UPDATE; COMMIT for forupdate and
// version, pg_advisory_lock + pg_advisory_unlock for advisory.
func floors(b *testing.B, c *pgx.Conn) map[string]func(ctx context.Context) error {
	ctx := context.Background()
	if _, err := c.Exec(ctx, "CREATE TABLE IF NOT EXISTS floor_locks (name text PRIMARY KEY); INSERT INTO floor_locks VALUES ('x') ON CONFLICT DO NOTHING"); err != nil {
		b.Fatal(err)
	}
	forUpdate := func(ctx context.Context) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		var n string
		if err := tx.QueryRow(ctx, "SELECT name FROM floor_locks WHERE name = 'x' FOR UPDATE").Scan(&n); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	return map[string]func(ctx context.Context) error{
		"forupdate": forUpdate,
		"version":   forUpdate,
		"advisory": func(ctx context.Context) error {
			if _, err := c.Exec(ctx, "SELECT pg_advisory_lock(42)"); err != nil {
				return err
			}
			_, err := c.Exec(ctx, "SELECT pg_advisory_unlock(42)")
			return err
		},
	}
}

func floorConn(b *testing.B) (*testenv.Server, *pgx.Conn) {
	srv := testenv.Postgres(b)
	c, err := pgx.Connect(context.Background(), srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(context.Background()) })
	return srv, c
}

// BenchmarkUncontended: Acquire+Release of a free lock per strategy ÷
// the hand-written floor, medians of one run (target ratio <= 1.3).
func BenchmarkUncontended(b *testing.B) {
	srv, c := floorConn(b)
	sqltest.BenchUncontended(b, srv.URL, sqltest.Strategies("advisory"), floors(b, c))
}

// BenchmarkContended: 8 workers, hold 1ms, 2ms between; grants/s ÷
// 1/(hold + one round trip) (targets: forupdate, advisory >= 0.9;
// version >= 0.8).
func BenchmarkContended(b *testing.B) {
	srv, c := floorConn(b)
	rtt := sqltest.RTT(b, 1000, func(ctx context.Context) error {
		_, err := c.Exec(ctx, "SELECT 1")
		return err
	})
	sqltest.BenchContended(b, srv.URL, sqltest.Strategies("advisory"), rtt)
}
