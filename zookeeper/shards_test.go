package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// busyLoad runs 16 goroutines of acquire+release on their own names on l
// until stop returns true (checked between cycles) or ctx ends.
func busyLoad(t *testing.T, ctx context.Context, l *dlock.Locker, stop func() bool) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for k := 0; ctx.Err() == nil && !stop(); k++ {
				if err := use(ctx, l, fmt.Sprintf("n%d-%d", g, k%50)); err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// extraSessions returns the Locker's extra sessions (none yet: nil).
func extraSessions(l *dlock.Locker) []*locker {
	if xs := driverOf(l).extras.Load(); xs != nil {
		return *xs
	}
	return nil
}

// TestSessionsSpread: a busy Locker opens its extra sessions and its
// attempts go through each of them; Close ends them all. It fails when a
// Locker keeps one session under load (each extra's requests are counted
// by its own connection's tracker).
func TestSessionsSpread(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		l := open(t, srv.URL, prefix, "recipe="+recipe)
		ctx := testenv.Context(t, 60*time.Second)
		end := time.Now().Add(10 * time.Second)
		used := func() bool {
			if time.Now().After(end) {
				return true
			}
			xs := extraSessions(l)
			for _, x := range xs {
				if x.s.tr.sent.Load() == 0 {
					return false
				}
			}
			return len(xs) > 0
		}
		busyLoad(t, ctx, l, used)
		xs := extraSessions(l)
		if len(xs) != defaultSessions-1 {
			t.Fatalf("%d extra sessions under load, want %d", len(xs), defaultSessions-1)
		}
		ids := map[int64]bool{driverOf(l).conn.SessionID(): true}
		for _, x := range xs {
			ids[x.conn.SessionID()] = true
		}
		if len(ids) != defaultSessions {
			t.Errorf("%d distinct sessions, want %d", len(ids), defaultSessions)
		}
		// The extra sessions' leases are the Locker's: one taken on each
		// is released by Close (their nodes go with their sessions).
		var held []*dlock.Lease
		for i := 0; len(held) < 50; i++ {
			ls, err := l.Acquire(ctx, fmt.Sprintf("held%d", i), &dlock.AcquireOptions{NoKeepAlive: true})
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, ls)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for _, x := range xs {
			if !x.closed() {
				t.Errorf("an extra session's locker is still open after Close")
			}
		}
		for _, ls := range held {
			select {
			case <-ls.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("a lease is not done after Close")
			}
		}
		for i := range held {
			if k := kids(t, admin, prefix, fmt.Sprintf("held%d", i)); recipe == RecipeFair && len(k) != 0 {
				t.Errorf("held%d: %d nodes left after Close", i, len(k))
			}
		}
	})
}

// TestSessionsOne: sessions=1 keeps a busy Locker on one session.
func TestSessionsOne(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	l := open(t, srv.URL, testPrefix(t), "sessions=1")
	ctx := testenv.Context(t, 30*time.Second)
	end := time.Now().Add(time.Second)
	busyLoad(t, ctx, l, func() bool { return time.Now().After(end) })
	if xs := extraSessions(l); len(xs) != 0 || driverOf(l).grown.Load() == false {
		t.Errorf("sessions=1: %d extra sessions (grown %v), want none, after a busy second", len(xs), driverOf(l).grown.Load())
	}
}

// TestWaitersKeepOneSession: attempts waiting for a lock do not count as
// busy: 16 waiters on 16 held names, queued one after another, leave the
// Locker on one session. It fails when waiting attempts count.
func TestWaitersKeepOneSession(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		holder := open(t, srv.URL, prefix, "recipe="+recipe)
		l := open(t, srv.URL, prefix, "recipe="+recipe)
		ctx := testenv.Context(t, 60*time.Second)
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range 16 {
			name := fmt.Sprintf("w%d", i)
			h, err := holder.Acquire(ctx, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			wg.Go(func() {
				ls, err := l.Acquire(wctx, name, nil)
				if err == nil {
					_ = ls.Release(ctx)
				} else if !errors.Is(err, context.Canceled) {
					t.Error(err)
				}
			})
			// Wait until it waits.
			for driverOf(l).parked.Load() != int32(i+1) {
				if ctx.Err() != nil {
					t.Fatalf("waiter %d: not waiting", i)
				}
				time.Sleep(time.Millisecond)
			}
		}
		if xs := extraSessions(l); len(xs) != 0 || driverOf(l).grown.Load() {
			t.Errorf("16 waiters opened %d extra sessions, want none", len(xs))
		}
		cancel()
		wg.Wait()
	})
}
