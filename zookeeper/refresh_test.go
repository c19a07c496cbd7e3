package zookeeper

import (
	"context"
	"errors"
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

// untilLocal refreshes ls until its next refresh needs no round trip (a
// watch set on the current connection).
func untilLocal(t testing.TB, ctx context.Context, ls *dlock.Lease, dl *lease) {
	t.Helper()
	for !dl.refreshedLocally() {
		if err := ls.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			t.Fatal("the lease's refreshes never became local")
		}
	}
}

// TestRefreshLocal: a lease whose node is watched on the current
// connection, with a recent reply, refreshes without a request. The
// grant's own watch serves (the basic recipe's pipelined read, the fair
// recipe's lazy watch): no refresh has to set one first.
func TestRefreshLocal(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		ctx := testenv.Context(t, 30*time.Second)
		ls, d, dl := holdOne(t, ctx, srv.URL, prefix, "session_timeout=2s&recipe="+recipe)
		tr := d.s.tr
		// Well before the first keep-alive (TTL/3 = 10s), which would set
		// a watch of its own.
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		for !dl.refreshedLocally() {
			if err := sleepCtx(wctx, 5*time.Millisecond); err != nil {
				t.Fatal("the grant's watch did not serve a refresh")
			}
		}
		sent := tr.sent.Load()
		const n = 100
		for range n {
			if err := ls.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := tr.sent.Load() - sent; got != 0 {
			t.Errorf("%d refreshes sent %d requests, want none", n, got)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestLocalRefreshSeesDeletion: once the holder's session has read the
// reply to any request sent after another session deleted the node (an
// administrator's revocation), no refresh is local any more, and the next
// refresh fails.
func TestLocalRefreshSeesDeletion(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		ctx := testenv.Context(t, 30*time.Second)
		ls, d, dl := holdOne(t, ctx, srv.URL, prefix, "session_timeout=2s&recipe="+recipe)
		untilLocal(t, ctx, ls, dl)
		if err := admin.Delete(dl.path, -1); err != nil {
			t.Fatal(err)
		}
		// Any request will do: its reply follows the deletion's event.
		if _, _, err := d.conn.Exists("/"); err != nil {
			t.Fatal(err)
		}
		if dl.refreshedLocally() {
			t.Error("a refresh would be local after the node's deletion")
		}
		select {
		case <-ls.Done():
		case <-ctx.Done():
			t.Fatal("the lease did not end after its node was deleted")
		}
		if err := ls.Refresh(ctx); !errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("refresh after the deletion: %v", err)
		}
	})
}

// TestRefreshAfterReconnect: after a reconnection the node's watch lives
// on only through go-zookeeper's background setWatches, so the next
// refresh makes a round trip (setting a watch on the new connection), and
// the ones after it are local again.
func TestRefreshAfterReconnect(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		ctx := testenv.Context(t, 30*time.Second)
		ls, d, dl := holdOne(t, ctx, srv.URL, prefix, "session_timeout=4s&recipe="+recipe)
		tr := d.s.tr
		untilLocal(t, ctx, ls, dl)
		dials := tr.dials.Load()
		tr.cut()
		for tr.dials.Load() == dials || d.conn.State() != zk.StateHasSession {
			if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
				t.Fatal("no reconnection")
			}
		}
		if dl.refreshedLocally() {
			t.Error("a refresh would be local on a new connection")
		}
		sent := tr.sent.Load()
		if err := ls.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if tr.sent.Load() == sent {
			t.Error("the first refresh after a reconnection sent no request")
		}
		untilLocal(t, ctx, ls, dl)
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestRefreshStalledConnection: when no reply has come for half the session
// timeout (the connection stalls), refreshes go back to round trips while
// the lease still holds, before go-zookeeper gives the connection up (2/3
// of the timeout without a read), so a refresh waits for the server again
// (here, until its ctx ends).
func TestRefreshStalledConnection(t *testing.T) {
	srv, admin, prefix, ctx := setup(t, 60*time.Second)
	px := newProxy(t, srv.Addr)
	ls, d, dl := holdOne(t, ctx, "zk://"+px.Addr(), prefix, "session_timeout=6s")
	tr := d.s.tr
	untilLocal(t, ctx, ls, dl)
	dials := tr.dials.Load()
	px.Pause()
	for dl.refreshedLocally() {
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			t.Fatal("refreshes stayed local on a stalled connection")
		}
	}
	if tr.dials.Load() != dials {
		t.Error("refreshes stayed local until go-zookeeper gave the connection up")
	}
	select {
	case <-ls.Done():
		t.Fatalf("the lease ended before its refreshes stopped being local: %v", ls.Err())
	default:
	}
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := ls.Refresh(rctx)
	cancel()
	if err == nil {
		t.Error("a refresh succeeded with the server silent past the window")
	}
	px.Resume()
	_ = ls.Release(ctx)
	assertNoOrphans(t, admin, prefix)
}
