package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/mysql"
)

// TestSharedSessions: GET_LOCK leases share sessions, on pools of 8.
func TestSharedSessions(t *testing.T) {
	srv := testenv.MySQL(t)
	open := func() *dlock.Locker {
		db := openDB(t, srv.DSN)
		db.SetMaxOpenConns(8)
		l, err := mysql.OpenLocker(db, &mysql.Options{Strategy: "getlock", MultiStatements: true, Table: "shared_sessions"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	sqltest.SharedSessions(t, open(), open(), open(), 8)
}

// TestGetLockWaitEndsOnServer: a blocking getlock Acquire of a held lock
// that reaches its deadline is ended by the server (GET_LOCK's timeout,
// sqllock.WaitMargin before the deadline), not by the context, whose
// interruption of the statement costs the connection: such waits open no
// connection. (Ended at the deadline or later, a wait always lost that
// race: its timer starts when the statement reaches the server. forupdate
// cannot do the same: innodb_lock_wait_timeout counts whole seconds.)
func TestGetLockWaitEndsOnServer(t *testing.T) {
	srv := testenv.MySQL(t)
	ctx := t.Context()
	db := openDB(t, srv.DSN)
	// opened counts the connections the server has accepted so far.
	opened := func() int64 {
		t.Helper()
		var name string
		var n int64
		if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Connections'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	url := testenv.WithParams(srv.URL, "strategy", "getlock")
	l, other := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	const name = "waitends"
	held, err := other.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	wait := func(d time.Duration) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		start := time.Now()
		if _, err := l.Acquire(actx, name, nil); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < d {
			t.Fatalf("a wait of %v for a held lock ended after %v with %v; want its deadline", d, time.Since(start), err)
		}
	}
	wait(300 * time.Millisecond) // opens the connection l waits on
	before := opened()
	for _, d := range []time.Duration{300 * time.Millisecond, 30 * time.Millisecond, 700 * time.Millisecond} {
		wait(d)
	}
	if n := opened() - before; n != 0 {
		t.Errorf("three waits that reached their deadline opened %d connections; want 0: a wait was interrupted, not ended by the server", n)
	}
}
