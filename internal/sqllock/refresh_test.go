package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
)

// remainingSQL returns the microseconds left on name's version lease by
// the server's clock (1: name), per backend.
var remainingSQL = map[string]func(q string) string{
	"postgres": func(q string) string {
		return "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1e6)::bigint FROM " + q + " WHERE name = $1"
	},
	"mysql": func(q string) string {
		return "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM " + q + " WHERE name = ?"
	},
}

// batchLeases opens a version Locker on each SQL server whose refreshes
// wait window for a batch, counting its statements, and holds n leases
// of it (no keep-alive: the test refreshes).
func batchLeases(t *testing.T, n int, window time.Duration, f func(t *testing.T, ctx context.Context, backend, url string, l *dlock.Locker, stmts func() int64, leases []*dlock.Lease)) {
	for _, s := range sqlServers {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			url := sqltest.WithParams(s.server(t).URL, "strategy", "version")
			l := sqltest.Open(t, ctx, url)
			core := sqltest.Core(l)
			core.SetRefreshWindow(window)
			count := core.CountStatements()
			leases := make([]*dlock.Lease, n)
			for i := range leases {
				ls, err := l.TryAcquire(ctx, fmt.Sprintf("%s-%d", t.Name(), i), &dlock.AcquireOptions{TTL: 30 * time.Second, NoKeepAlive: true})
				if err != nil {
					t.Fatalf("acquire %d: %v", i, err)
				}
				t.Cleanup(func() { _ = ls.Release(context.Background()) })
				leases[i] = ls
			}
			f(t, ctx, s.name, url, l, func() int64 { return count.Load() }, leases)
		})
	}
}

// refreshAll refreshes leases at once and returns each one's error.
func refreshAll(ctx context.Context, leases []*dlock.Lease) []error {
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, ls := range leases {
		wg.Go(func() { errs[i] = ls.Refresh(ctx) })
	}
	wg.Wait()
	return errs
}

// TestRefreshBatch: version leases of one Locker refreshed at once go in
// one statement, and every one is extended.
func TestRefreshBatch(t *testing.T) {
	batchLeases(t, 20, 500*time.Millisecond, func(t *testing.T, ctx context.Context, _, _ string, _ *dlock.Locker, stmts func() int64, leases []*dlock.Lease) {
		before := stmts()
		for i, err := range refreshAll(ctx, leases) {
			if err != nil {
				t.Fatalf("refresh %d: %v", i, err)
			}
		}
		if n := stmts() - before; n != 1 {
			t.Fatalf("%d leases refreshed at once: %d statements, want 1", len(leases), n)
		}
	})
}

// TestRefreshBatchLost: a lease lost to another owner fails its refresh
// alone, with ErrNotHeld, in a batch with held ones; the batch extends
// neither it nor the new owner's lease in its place.
func TestRefreshBatchLost(t *testing.T) {
	batchLeases(t, 9, 500*time.Millisecond, func(t *testing.T, ctx context.Context, _, url string, l *dlock.Locker, _ func() int64, leases []*dlock.Lease) {
		const lost = 4
		name := leases[lost].Name()
		if err := sqltest.Revoke(ctx, l, "version", name); err != nil {
			t.Fatal(err)
		}
		other := sqltest.Open(t, ctx, url)
		taker, err := other.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: 30 * time.Second, NoKeepAlive: true})
		if err != nil {
			t.Fatalf("the new owner: %v", err)
		}
		defer taker.Release(context.Background())
		for i, err := range refreshAll(ctx, leases) {
			switch {
			case i == lost && !errors.Is(err, dlock.ErrNotHeld):
				t.Fatalf("the lost lease's refresh: %v, want ErrNotHeld", err)
			case i != lost && err != nil:
				t.Fatalf("refresh %d (held): %v", i, err)
			}
		}
		if err := taker.Refresh(ctx); err != nil {
			t.Fatalf("the new owner's lease: %v", err)
		}
	})
}

// TestRefreshBatchDeadline: a lease's new expiry is at least its own
// refresh's start plus the TTL, for the last lease to join a batch too
// (the statement runs after each caller started).
func TestRefreshBatchDeadline(t *testing.T) {
	const window = 300 * time.Millisecond
	batchLeases(t, 2, window, func(t *testing.T, ctx context.Context, backend, _ string, l *dlock.Locker, _ func() int64, leases []*dlock.Lease) {
		first := make(chan error, 1)
		go func() { first <- leases[0].Refresh(ctx) }()
		time.Sleep(window / 2)
		start := time.Now()
		if err := leases[1].Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		var rem int64
		stmt := sqllock.S(remainingSQL[backend](sqltest.Core(l).Table().Q), leases[1].Name())
		if _, err := sqltest.Exec(ctx, l, []sqllock.Stmt{stmt}, &rem); err != nil {
			t.Fatal(err)
		}
		// The server's now was at most time.Since(start) after start.
		if left, want := time.Duration(rem)*time.Microsecond, 30*time.Second-time.Since(start); left < want {
			t.Fatalf("%v left after the refresh that started %v ago: its expiry is before its start + TTL", left, time.Since(start))
		}
	})
}
