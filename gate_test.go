package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/memory"
	_ "github.com/dlock-go/dlock/redis"
)

// waitFor polls cond until it holds or the test's context ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// Waiters of one Locker on one name are granted in the order they came:
// the first waits in the backend's queue, the others in the Locker's.
func TestGateLocalFIFO(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns := memory.NewNamespace()
	l := memory.OpenLocker(ns)
	defer l.Close()
	first, err := l.Acquire(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	for i := range n {
		go func() {
			ls, err := l.Acquire(ctx, "q", nil)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			_ = ls.Release(ctx)
		}()
		waitFor(t, ctx, "queueing the waiters one by one", func() bool {
			_, queued, _ := dlock.GateState(l, "q")
			return ns.Waiters("q") == 1 && queued == i
		})
	}
	_ = first.Release(ctx)
	for want := range n {
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d", want, got)
		}
	}
	waitFor(t, ctx, "the gate's entry removed once idle", func() bool {
		exists, _, _ := dlock.GateState(l, "q")
		return !exists
	})
}

// Cancelled local waiters leave nothing; Close ends the others with
// ErrClosed; the gate forgets idle names.
func TestGateCancelAndClose(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	l, err := dlock.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	holder, err := l.Acquire(ctx, "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	errs := make(chan error, 8)
	for range 4 {
		go func() {
			_, err := l.Acquire(wctx, "c", nil)
			errs <- err
		}()
	}
	waitFor(t, ctx, "4 waiters", func() bool { _, q, _ := dlock.GateState(l, "c"); return q == 3 })
	cancel()
	for range 4 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled waiter returned %v, want context.Canceled", err)
		}
	}
	if _, q, _ := dlock.GateState(l, "c"); q != 0 {
		t.Fatalf("%d waiters left in the local queue after they were cancelled", q)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if exists, _, n := dlock.GateState(l, "c"); exists || n != 0 {
		t.Fatalf("the gate keeps an entry (%v) or %d entries for an idle Locker", exists, n)
	}
	// The name is free at once for a sibling and another Locker.
	ls, err := l.TryAcquire(ctx, "c", nil)
	if err != nil {
		t.Fatalf("TryAcquire after the cancelled waiters: %v", err)
	}
	for range 4 {
		go func() {
			_, err := l.Acquire(ctx, "c", nil)
			errs <- err
		}()
	}
	waitFor(t, ctx, "4 waiters", func() bool { _, q, _ := dlock.GateState(l, "c"); return q == 3 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := <-errs; !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("a waiter ended by Close returned %v, want ErrClosed", err)
		}
	}
	if !errors.Is(ls.Err(), dlock.ErrClosed) {
		t.Fatalf("the lease's Err after Close: %v", ls.Err())
	}
}

// The gate holds entries only for names in use: 10 000 names cycled
// through on one Locker leave none behind.
func TestGateForgetsIdleNames(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	l, err := dlock.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < 10000; i += 8 {
				ls, err := l.Acquire(ctx, "n/"+strconv.Itoa(i), nil)
				if err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 { // a sibling's try of a held name: refused locally
					if _, err := l.TryAcquire(ctx, "n/"+strconv.Itoa(i), nil); !errors.Is(err, dlock.ErrNotAcquired) {
						t.Errorf("TryAcquire of a name held by a sibling: %v", err)
					}
				}
				_ = ls.Release(ctx)
			}
		})
	}
	wg.Wait()
	if _, _, n := dlock.GateState(l, ""); n != 0 {
		t.Fatalf("the gate keeps %d entries after every lease was released", n)
	}
}

// commandCalls returns the calls of each command the server ran but INFO
// (INFO commandstats; a script's redis.call counts too).
func commandCalls(t testing.TB, ctx context.Context, c *goredis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls, err := testenv.RedisCommandCalls(info)
	if err != nil {
		t.Fatal(err)
	}
	delete(calls, "info")
	return calls
}

// Ten TryAcquire calls of one Redlock Locker on a free name: exactly one
// wins (without the gate they split the nodes' votes and all failed).
func TestGateRedlockTryAcquireOneWinner(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	nodes := testenv.NewRedisNodes(t, 3, nil)
	addrs := make([]string, len(nodes))
	for i, s := range nodes {
		addrs[i] = s.Addr
	}
	l, err := dlock.Open(ctx, "redlock://"+strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for round := range 200 {
		name := fmt.Sprintf("gate/redlock/%d", round)
		start := make(chan struct{})
		var wins atomic.Int32
		var wg sync.WaitGroup
		var leases sync.Map
		for i := range 10 {
			wg.Go(func() {
				<-start
				ls, err := l.TryAcquire(ctx, name, nil)
				switch {
				case err == nil:
					wins.Add(1)
					leases.Store(i, ls)
				case !errors.Is(err, dlock.ErrNotAcquired):
					t.Errorf("TryAcquire: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if w := wins.Load(); w != 1 {
			t.Errorf("round %d: %d of 10 TryAcquire calls of one Redlock Locker won, want 1", round, w)
		}
		leases.Range(func(_, v any) bool { _ = v.(*dlock.Lease).Release(ctx); return true })
	}
}

// sameLockerWaiters has n goroutines of one Locker acquire and release one
// Redis name until grants grants are made, and returns the server commands
// per grant (INFO commandstats): those the clients sent (scripts, pub/sub,
// plain commands) and, by name, every command run (a script's redis.call
// counts too).
func sameLockerWaiters(t testing.TB, ctx context.Context, n, grants int) (sent float64, byName map[string]float64) {
	srv := testenv.NewRedis(t, nil)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer raw.Close()
	l, err := dlock.Open(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	name := "gate/waiters"
	// Warm: the driver's scripts loaded, its connections made.
	for range 3 {
		ls, err := l.Acquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = ls.Release(ctx)
	}
	before := commandCalls(t, ctx, raw)
	var left atomic.Int64
	left.Store(int64(grants))
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				ls, err := l.Acquire(ctx, name, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if err := ls.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	after := commandCalls(t, ctx, raw)
	byName = map[string]float64{}
	for name, k := range after {
		if d := k - before[name]; d != 0 {
			byName[name] = float64(d) / float64(grants)
		}
	}
	// What the clients sent: the scripts and the commands a script does
	// not run (pub/sub registration, the driver's plain commands).
	for _, name := range []string{"evalsha", "eval", "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ping"} {
		sent += byName[name]
	}
	return sent, byName
}

// 64 goroutines of one Locker on one Redis name: a release wakes one of
// them, locally, which then tries once. Server commands per grant are an
// exact count (INFO commandstats), not a timing: at most 3 (the issue's
// target), where every waiter watching and trying on every release cost
// 63.5 script calls per grant.
func TestGateSameLockerWaitersRedis(t *testing.T) {
	ctx := testenv.Context(t, 120*time.Second)
	per, byName := sameLockerWaiters(t, ctx, 64, 640)
	t.Logf("64 waiters on one Locker: %.2f commands sent per grant; every command run, per grant: %v", per, byName)
	if per > 3 {
		t.Errorf("%.2f server commands per grant with 64 waiters on one Locker, want at most 3", per)
	}
}
