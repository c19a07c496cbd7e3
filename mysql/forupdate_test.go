package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// tableTest starts a test of strategy on a table of its own on the
// package's server: its context (a minute), a pool of the test's own and
// the Locker's URL.
func tableTest(t *testing.T, strategy, table string) (context.Context, *sql.DB, string) {
	srv := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx, openDB(t, srv.DSN), sqltest.WithParams(srv.URL, "strategy", strategy, "table", table)
}

// TestForUpdateLeavesTheRowUnwritten: a forupdate grant locks the name's
// row, which its waiters queue on, and writes nothing to it (its holder
// goes to the holder table): read dirty while the lock is held, the row
// is as committed. A holder that wrote the row cost every grant the
// row's undo and its waiters a changed row to read again (MySQL's handoff
// at 32 waiters fell to half its rate at 8).
func TestForUpdateLeavesTheRowUnwritten(t *testing.T) {
	ctx, db, u := tableTest(t, "forupdate", "unwritten")
	l := sqltest.Open(t, ctx, u)
	const name = "unwritten"
	for range 2 { // the first grant creates the row
		ls, err := l.TryAcquire(ctx, name, &dlock.AcquireOptions{Owner: "holder/1", NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	type row struct {
		fence   int64
		owner   string
		session *int64
	}
	read := func(isolation string) row {
		t.Helper()
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var r row
		if _, err := c.ExecContext(ctx, "SET TRANSACTION ISOLATION LEVEL "+isolation); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "SELECT fence, owner, session FROM unwritten WHERE name = ?", name).Scan(&r.fence, &r.owner, &r.session); err != nil {
			t.Fatal(err)
		}
		return r
	}
	committed := read("READ COMMITTED")
	ls, err := l.TryAcquire(ctx, name, &dlock.AcquireOptions{Owner: "holder/1", NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(context.Background())
	if dirty := read("READ UNCOMMITTED"); dirty.fence != committed.fence || dirty.owner != committed.owner || (dirty.session == nil) != (committed.session == nil) {
		t.Errorf("held (token %d): the row read dirty is fence %d owner %q, committed fence %d owner %q: the grant wrote the row its waiters queue on",
			ls.Token(), dirty.fence, dirty.owner, committed.fence, committed.owner)
	}
	info, err := l.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Owner != "holder/1" || info.Fence != ls.Token() {
		t.Errorf("inspect: %+v, want held by %q with fence %d", info, "holder/1", ls.Token())
	}
}

// TestForUpdateAddsTheGrantTable: a lock table made by a dlock from
// before the grant table gets one when a Locker opens it (the migration
// only adds a table), its locks are granted and inspected as usual, and
// their tokens go on above every token the older counter gave out, even
// one far ahead of the clock (its recoveries' jumps).
func TestForUpdateAddsTheGrantTable(t *testing.T) {
	ctx, db, u := tableTest(t, "forupdate", "before_grant")
	l := sqltest.Open(t, ctx, u)
	ls, err := l.TryAcquire(ctx, "n", &dlock.AcquireOptions{NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	ahead := ls.Token() + 1<<40 // an older counter's tokens, past the clock's and one jump
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := db.ExecContext(ctx, "DROP TABLE before_grant_grant"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO before_grant_fence (id) VALUES (?); DELETE FROM before_grant_fence", ahead); err != nil {
		t.Fatal(err)
	}
	l = sqltest.Open(t, ctx, u)
	ls, err = l.TryAcquire(ctx, "n", &dlock.AcquireOptions{Owner: "after/1", NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	if ls.Token() <= ahead {
		t.Errorf("token %d after the older counter's %d", ls.Token(), ahead)
	}
	if info, err := l.Inspect(ctx, "n"); err != nil || !info.Held || info.Owner != "after/1" || info.Fence != ls.Token() {
		t.Errorf("inspect: %+v, %v; want held by %q with fence %d", info, err, "after/1", ls.Token())
	}
}

// TestForUpdateRowCreatedInTheLock: the first use of a name by a Locker
// creates its row in the lock's own script; a Locker that has not seen a
// name held by another is refused (TryAcquire) or waits (Acquire), and a
// row deleted after a Locker saw it is created again by its next grant,
// whose token is larger.
func TestForUpdateRowCreatedInTheLock(t *testing.T) {
	ctx, db, u := tableTest(t, "forupdate", "created")
	a, b := sqltest.Open(t, ctx, u), sqltest.Open(t, ctx, u)
	opts := &dlock.AcquireOptions{NoKeepAlive: true}
	held, err := a.TryAcquire(ctx, "c", opts)
	if err != nil {
		t.Fatal(err)
	}
	if ls, err := b.TryAcquire(ctx, "c", opts); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			ls.Release(ctx)
		}
		t.Fatalf("a held name, tried by a Locker that had not seen it: %v, want ErrNotAcquired", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer wcancel()
	got := make(chan error, 1)
	go func() {
		ls, err := b.Acquire(wctx, "c", opts)
		if err == nil {
			if ls.Token() <= held.Token() {
				err = fmt.Errorf("token %d after %d", ls.Token(), held.Token())
			}
			ls.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a waiter that had not seen the name: %v", err)
	}
	last, err := a.TryAcquire(ctx, "c", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := last.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM created WHERE name = 'c'"); err != nil {
		t.Fatal(err)
	}
	again, err := a.TryAcquire(ctx, "c", opts)
	if err != nil {
		t.Fatalf("a row deleted after its Locker saw it: %v", err)
	}
	defer again.Release(ctx)
	if again.Token() <= last.Token() {
		t.Errorf("token %d after %d", again.Token(), last.Token())
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM created WHERE name = 'c'").Scan(&n); err != nil || n != 1 {
		t.Errorf("the row after the grant: %d rows, %v; want 1", n, err)
	}
}

// TestForUpdateConnectionLimit: each held forupdate lease keeps a
// connection of its own, so a Locker holding as many as the server's
// max_connections allows gets no more: its Acquire fails at once with the
// server's refusal (ER_CON_COUNT_ERROR, wrapped), saying why, and the
// leases it holds stay held.
func TestForUpdateConnectionLimit(t *testing.T) {
	srv := testenv.NewMySQL(t, &testenv.MySQLOptions{Args: []string{"--max-connections=4"}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l := sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", "forupdate"))
	var held []*dlock.Lease
	defer func() {
		for _, ls := range held {
			ls.Release(ctx)
		}
	}()
	var err error
	for i := 0; i < 20; i++ {
		var ls *dlock.Lease
		if ls, err = l.Acquire(ctx, fmt.Sprint("limit-", i), &dlock.AcquireOptions{NoKeepAlive: true}); err != nil {
			break
		}
		held = append(held, ls)
	}
	var me *gomysql.MySQLError
	if err == nil || !errors.As(err, &me) || me.Number != 1040 || !strings.Contains(err.Error(), "max_connections") || ctx.Err() != nil {
		t.Fatalf("%d leases held, then %v; want the server's refusal (1040) that names max_connections", len(held), err)
	}
	t.Logf("%d leases held, then: %v", len(held), err)
	for _, ls := range held {
		if ls.Err() != nil {
			t.Errorf("a held lease ended: %v", ls.Err())
		}
	}
}

// TestForUpdateWaitingGrantFallsBack: a blocking Acquire's grant is one
// statement, which takes no token when the server's marker is missing
// and finds no row when the name's row was deleted; its fallback tells
// the two apart: it moves the counter on (the token jumps), or creates
// the row, and grants with a larger token either way.
func TestForUpdateWaitingGrantFallsBack(t *testing.T) {
	ctx, db, u := tableTest(t, "forupdate", "fallback")
	l := sqltest.Open(t, ctx, u)
	opts := &dlock.AcquireOptions{NoKeepAlive: true}
	take := func(step string) uint64 {
		t.Helper()
		ls, err := l.Acquire(ctx, "f", opts)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return ls.Token()
	}
	first := take("first")
	if _, err := db.ExecContext(ctx, "DELETE FROM fallback_live"); err != nil {
		t.Fatal(err)
	}
	recovered := take("marker missing")
	if recovered < first+1<<36 {
		t.Errorf("marker missing: token %d after %d, want the counter moved on by 2^36", recovered, first)
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM fallback WHERE name = 'f'"); err != nil {
		t.Fatal(err)
	}
	if again := take("row deleted"); again <= recovered {
		t.Errorf("row deleted: token %d after %d", again, recovered)
	}
}

// TestForUpdateMarkerClearedWhileWaiting: the marker cleared (a restart's
// loss, Migrate's reset) while a grant waits for the row lock never lets
// that grant take a token without moving the counter on: either the clear
// waits for the waiting statement, or the grant finds the marker missing.
// A check of the marker in a statement before the waiting one fails it.
func TestForUpdateMarkerClearedWhileWaiting(t *testing.T) {
	ctx, db, u := tableTest(t, "forupdate", "midwait")
	holder, waiter := sqltest.Open(t, ctx, u), sqltest.Open(t, ctx, u)
	opts := &dlock.AcquireOptions{NoKeepAlive: true}
	held, err := holder.Acquire(ctx, "m", opts)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan *dlock.Lease, 1)
	go func() {
		ls, err := waiter.Acquire(ctx, "m", opts)
		if err != nil {
			t.Error(err)
		}
		granted <- ls
	}()
	time.Sleep(200 * time.Millisecond) // the waiter's statement waits for the row
	cleared := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, "DELETE FROM midwait_live")
		cleared <- err
	}()
	clearedFirst := false
	select {
	case err := <-cleared:
		if err != nil {
			t.Fatal(err)
		}
		clearedFirst = true
	case <-time.After(300 * time.Millisecond):
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-granted
	if got == nil {
		return
	}
	defer got.Release(ctx)
	if !clearedFirst {
		if err := <-cleared; err != nil {
			t.Fatal(err)
		}
		t.Log("the clear waited for the grant")
		return // the clear waited for the grant's statement
	}
	if got.Token() < held.Token()+1<<36 {
		t.Errorf("the marker was cleared while the grant waited: token %d after %d, want the counter moved on by 2^36", got.Token(), held.Token())
	}
}
