package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// floorConn is one connection for the hand-written floors, with the
// driver's settings that save round trips.
func floorConn(b *testing.B) (*testenv.Server, *sql.Conn) {
	srv := testenv.MySQL(b)
	db, err := sql.Open("mysql", srv.DSN+"?interpolateParams=true")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	c, err := db.Conn(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return srv, c
}

// BenchmarkUncontended: Acquire+Release of a free lock per strategy ÷
// the hand-written floor on one connection: BEGIN; SELECT … FOR UPDATE;
// COMMIT (forupdate, version), GET_LOCK + RELEASE_LOCK (getlock); medians
// of one run (target ratio <= 1.3).
func BenchmarkUncontended(b *testing.B) {
	srv, c := floorConn(b)
	ctx := context.Background()
	if _, err := c.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS floor_locks (name VARCHAR(64) PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		b.Fatal(err)
	}
	if _, err := c.ExecContext(ctx, "INSERT IGNORE INTO floor_locks VALUES ('x')"); err != nil {
		b.Fatal(err)
	}
	forUpdate := func(ctx context.Context) error {
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var n string
		if err := tx.QueryRowContext(ctx, "SELECT name FROM floor_locks WHERE name = 'x' FOR UPDATE").Scan(&n); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	getLock := func(ctx context.Context) error {
		var ok int
		if err := c.QueryRowContext(ctx, "SELECT GET_LOCK('floor', 10)").Scan(&ok); err != nil {
			return err
		}
		return c.QueryRowContext(ctx, "SELECT RELEASE_LOCK('floor')").Scan(&ok)
	}
	sqltest.BenchUncontended(b, srv.URL, sqltest.Strategies("getlock"),
		map[string]func(context.Context) error{"forupdate": forUpdate, "version": forUpdate, "getlock": getLock})
}

// BenchmarkContended: 8 workers, hold 1ms, 2ms between; grants/s ÷
// 1/(hold + one round trip) (targets: forupdate, getlock >= 0.9; version
// polls and has no target).
func BenchmarkContended(b *testing.B) {
	srv, c := floorConn(b)
	rtt := sqltest.RTT(b, 1000, func(ctx context.Context) error {
		var n int
		return c.QueryRowContext(ctx, "SELECT 1").Scan(&n)
	})
	sqltest.BenchContended(b, srv.URL, sqltest.Strategies("getlock"), rtt)
}
