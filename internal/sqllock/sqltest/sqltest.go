// Package sqltest holds the tests and benchmarks that dlock's SQL drivers
// (packages postgres and mysql) share: each driver's _test.go calls them
// with its server's URL and a small Admin that reaches the server's
// sessions, so the same checks are written once.
package sqltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// Strategies are the URL values of the three strategies of a backend.
func Strategies(native string) []string { return []string{"forupdate", "version", native} }

// WithParams appends query parameters to a URL (testenv.WithParams).
var WithParams = testenv.WithParams

// Open opens a Locker and closes it at the end of the test.
func Open(t testing.TB, ctx context.Context, rawURL string) *dlock.Locker {
	t.Helper()
	l, err := dlock.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Core returns the strategy core of a Locker of a SQL driver. Every
// driver sqllock.New returns has the core's Core method (its wrappers
// embed it); Core panics on a Locker of another driver, a test's mistake.
func Core(l *dlock.Locker) *sqllock.Locker {
	c, ok := l.Driver().(interface{ Core() *sqllock.Locker })
	if !ok {
		panic(fmt.Sprintf("sqltest: %T is not a driver of package sqllock", l.Driver()))
	}
	return c.Core()
}

// AdminSQL returns the test and operator SQL of l's dialect for l's table:
// the one way tests and hooks reach it. The dialect provides it by
// implementing sqllock.AdminDialect (in its package's admin.go); AdminSQL
// panics when it does not, a driver's mistake.
func AdminSQL(l *dlock.Locker) sqllock.Admin {
	c := Core(l)
	a, ok := c.Dialect().(sqllock.AdminDialect)
	if !ok {
		panic(fmt.Sprintf("sqltest: the %s dialect has no admin SQL: it must implement sqllock.AdminDialect", c.Dialect().Backend()))
	}
	return a.Admin(c.Table())
}

// Exec runs stmts on one connection of l's pool and scans the last
// statement's first row into dest; found is false when it had no row.
func Exec(ctx context.Context, l *dlock.Locker, stmts []sqllock.Stmt, dest ...any) (found bool, err error) {
	return Core(l).Pool().Run(ctx, stmts, dest...)
}

// Basic checks acquire, try-acquire while held, release, and that tokens
// increase.
func Basic(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a := Open(t, ctx, rawURL)
	b := Open(t, ctx, rawURL)
	name := "basic/" + time.Now().Format(time.RFC3339Nano)
	la, err := a.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := b.TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("try-acquire while held: %v, want ErrNotAcquired", err)
	}
	var got atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	var lb *dlock.Lease
	go func() {
		defer wg.Done()
		var err error
		lb, err = b.Acquire(ctx, name, nil)
		if err != nil {
			t.Errorf("waiting acquire: %v", err)
			return
		}
		got.Store(true)
	}()
	time.Sleep(100 * time.Millisecond)
	if got.Load() {
		t.Fatal("a waiter got a held lock")
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	wg.Wait()
	if lb == nil {
		return
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after %d: not increasing", lb.Token(), la.Token())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := la.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second release: %v, want ErrNotHeld", err)
	}
}
