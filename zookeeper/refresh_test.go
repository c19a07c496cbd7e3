package zookeeper

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// leaseOf returns the driver's lease under ls, the one lease its Locker
// holds.
func leaseOf(t testing.TB, l *dlock.Locker) *lease {
	t.Helper()
	s := driverOf(l).s
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.leases) != 1 {
		t.Fatalf("%d leases registered, want 1", len(s.leases))
	}
	for x := range s.leases {
		return x
	}
	return nil
}

// holdOne opens a Locker on url with query and takes the name "a": the
// portable lease, its Locker's driver and the driver's lease.
func holdOne(t *testing.T, ctx context.Context, url, prefix, query string) (*dlock.Lease, *locker, *lease) {
	t.Helper()
	l := open(t, url, prefix, query)
	ls, err := l.Acquire(ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	return ls, driverOf(l), leaseOf(t, l)
}

// untilArmed refreshes ls until the node has a watch on the current
// connection that refreshes may rely on.
func untilArmed(t testing.TB, ctx context.Context, ls *dlock.Lease, dl *lease) {
	t.Helper()
	for dl.armedNow() == nil {
		if err := ls.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			t.Fatal("the lease's node never had a watch to rely on")
		}
	}
}

// TestRefreshesShareRoundTrips: refreshes of watched nodes share round
// trips: 100 at once send a few requests, and not none (each needs a
// request sent after it began). The grant's own watch serves (the lazy
// watch each recipe sets lazyWatch after an uncontended grant): no refresh
// has to set one first.
func TestRefreshesShareRoundTrips(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		ctx := testenv.Context(t, 30*time.Second)
		ls, d, dl := holdOne(t, ctx, srv.URL, prefix, "recipe="+recipe)
		// Well before the first keep-alive (TTL/3 = 10s), which would set
		// a watch of its own.
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		for dl.armedNow() == nil {
			if err := sleepCtx(wctx, 5*time.Millisecond); err != nil {
				t.Fatal("the grant's watch did not serve")
			}
		}
		const n = 100
		sent := d.s.tr.sent.Load()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if err := ls.Refresh(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got := d.s.tr.sent.Load() - sent; got < 1 || got > n/10 {
			t.Errorf("%d refreshes at once sent %d requests, want 1 to %d", n, got, n/10)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestSharedRefreshSeesRevocation: a refresh that begins after another
// session deleted the node (an administrator's revocation) does not
// succeed on a shared round trip, and fails.
func TestSharedRefreshSeesRevocation(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		ctx := testenv.Context(t, 30*time.Second)
		ls, _, dl := holdOne(t, ctx, srv.URL, prefix, "recipe="+recipe)
		untilArmed(t, ctx, ls, dl)
		if err := admin.Delete(dl.path, -1); err != nil {
			t.Fatal(err)
		}
		// Not stopped by the loss the node's own watch reports: the
		// shared round trip alone must tell.
		if ok, err := dl.refreshShared(ctx, nil); ok {
			t.Error("a shared refresh succeeded after the node's deletion")
		} else if err != nil {
			t.Fatal(err)
		}
		if err := ls.Refresh(ctx); !errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("refresh after the deletion: %v", err)
		}
		select {
		case <-ls.Done():
		case <-ctx.Done():
			t.Fatal("the lease did not end after its node was deleted")
		}
	})
}

// TestRefreshAfterReconnect: after a reconnection the node's watch lives
// on only through go-zookeeper's background setWatches, so the next
// refresh makes a round trip of its own, setting a watch on the new
// connection that the ones after it rely on.
func TestRefreshAfterReconnect(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		ctx := testenv.Context(t, 30*time.Second)
		ls, d, dl := holdOne(t, ctx, srv.URL, prefix, "session_timeout=4s&recipe="+recipe)
		tr := d.s.tr
		untilArmed(t, ctx, ls, dl)
		dials := tr.dials.Load()
		tr.cut()
		for tr.dials.Load() == dials || d.conn.State() != zk.StateHasSession {
			if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
				t.Fatal("no reconnection")
			}
		}
		if dl.armedNow() != nil {
			t.Error("refreshes would rely on a watch set on the old connection")
		}
		if err := ls.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if dl.armedNow() == nil {
			t.Error("the first refresh after a reconnection set no watch to rely on")
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestRefreshStalledConnection: a refresh of a watched node does not
// succeed while the server is silent (the connection stalls, shorter than
// the session timeout: the lease holds); it waits for the server, here
// until its ctx ends.
func TestRefreshStalledConnection(t *testing.T) {
	srv, admin, prefix, ctx := setup(t, 60*time.Second)
	px := newProxy(t, srv.Addr)
	ls, _, dl := holdOne(t, ctx, "zk://"+px.Addr(), prefix, "session_timeout=4s")
	untilArmed(t, ctx, ls, dl)
	px.Pause()
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := ls.Refresh(rctx)
	cancel()
	if err == nil {
		t.Error("a refresh succeeded with the server silent")
	}
	select {
	case <-ls.Done():
		t.Errorf("the lease ended within the stall: %v", ls.Err())
	default:
	}
	px.Resume()
	_ = ls.Release(ctx)
	assertNoOrphans(t, admin, prefix)
}
