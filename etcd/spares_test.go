package etcd

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestSpares: a released lease's etcd lease is the next acquisition's (no
// grant, no revoke on the lock's path); at most maxSpares are kept per TTL
// however many leases were released at once; Close revokes every one.
func TestSpares(t *testing.T) {
	s := testenv.NewEtcd(t, nil)
	ctx := testenv.Context(t, time.Minute)
	prefix := fmt.Sprintf("/dlocktest/spares-%d", time.Now().UnixNano())
	l, err := dlock.Open(ctx, s.URL+prefix)
	if err != nil {
		t.Fatal(err)
	}
	opts := &dlock.AcquireOptions{TTL: 3 * time.Second}

	// One name, acquired and released in turn: one etcd lease throughout.
	seen := map[string]bool{}
	for range 5 {
		ls, err := l.Acquire(ctx, "a", opts)
		if err != nil {
			t.Fatal(err)
		}
		seen[holderLease(t, ctx, s.Addr, layout.EtcdQueue(prefix, "a"))] = true
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 1 {
		t.Errorf("5 acquisitions in turn used %d etcd leases, want 1 (the spare): %v", len(seen), seen)
	}

	// 3 × maxSpares leases at once, then all released: at most maxSpares
	// stay on the server.
	var wg sync.WaitGroup
	leases := make([]*dlock.Lease, 3*maxSpares)
	for i := range leases {
		wg.Go(func() {
			ls, err := l.Acquire(ctx, fmt.Sprint("n", i), opts)
			if err != nil {
				t.Error(err)
				return
			}
			leases[i] = ls
		})
	}
	wg.Wait()
	for _, ls := range leases {
		if ls != nil {
			_ = ls.Release(ctx)
		}
	}
	waitLeases(t, ctx, s.Addr, maxSpares, "after releasing 3 × maxSpares leases")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, ctx, s.Addr, 0, "after Close")
}

// holderLease returns the etcd lease (its decimal id) of queue's first key.
func holderLease(t *testing.T, ctx context.Context, addr, queue string) string {
	t.Helper()
	kvs := rangeKeys(t, ctx, addr, queue)
	if len(kvs) != 1 || kvs[0].Lease == "" {
		t.Fatalf("queue %s: %+v, want one key under a lease", queue, kvs)
	}
	return kvs[0].Lease
}

// waitLeases waits up to 5s until the server has at most n leases.
func waitLeases(t *testing.T, ctx context.Context, addr string, n int, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var r struct {
			Leases []struct {
				ID string `json:"ID"`
			} `json:"leases"`
		}
		if err := testenv.EtcdCall(ctx, addr, "/v3/lease/leases", map[string]any{}, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Leases) <= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the server has %d leases, want at most %d", when, len(r.Leases), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSpareSecond: with the spare second (a TTL of 10s or more), an
// acquisition that skips the renewal (a spare renewed less than
// reuseWindow ago, a waiter's lease likewise) finds the server holding the
// etcd lease a whole TTL from its grant; so does one that renews (a spare
// older than the window). The server reports the time left in whole
// seconds, rounded down: a round whose look comes more than 50ms after the
// acquisition's start proves nothing and is tried again.
func TestSpareSecond(t *testing.T) {
	s := testenv.NewEtcd(t, nil)
	ctx := testenv.Context(t, 2*time.Minute)
	prefix := fmt.Sprintf("/dlocktest/second-%d", time.Now().UnixNano())
	l, err := dlock.Open(ctx, s.URL+prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ttl := int64(spareSecondFrom)
	opts := &dlock.AcquireOptions{TTL: time.Duration(ttl) * time.Second}
	queue := layout.EtcdQueue(prefix, "a")
	// wholeTTLLeft reports whether the holder's etcd lease has a whole TTL
	// left, and whether the look was prompt enough to tell.
	wholeTTLLeft := func(start time.Time) (ok, prompt bool) {
		id := holderLease(t, ctx, s.Addr, queue)
		sent := time.Now()
		var r struct {
			TTL string `json:"TTL"`
		}
		if err := testenv.EtcdCall(ctx, s.Addr, "/v3/lease/timetolive", map[string]any{"ID": id}, &r); err != nil {
			t.Fatal(err)
		}
		left, err := strconv.ParseInt(r.TTL, 10, 64)
		if err != nil {
			t.Fatalf("lease %s: TTL %q: %v", id, r.TTL, err)
		}
		return left >= ttl, sent.Sub(start) < 50*time.Millisecond
	}
	ls, err := l.Acquire(ctx, "a", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, age := range []time.Duration{0, reuseWindow(ttl) - 150*time.Millisecond, reuseWindow(ttl) + 200*time.Millisecond} {
		proved := false
		for try := 0; try < 5 && !proved; try++ {
			time.Sleep(age)
			start := time.Now()
			ls, err := l.Acquire(ctx, "a", opts)
			if err != nil {
				t.Fatal(err)
			}
			ok, prompt := wholeTTLLeft(start)
			if prompt && !ok {
				t.Errorf("a spare %v old: the server holds the etcd lease less than the TTL (%ds) from the acquisition's start", age, ttl)
			}
			proved = prompt
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if !proved {
			t.Logf("a spare %v old: no look within 50ms of the acquisition in 5 tries (a loaded machine)", age)
		}
	}

	// A waiter granted 300ms after it queued: its etcd lease, renewed when
	// it queued, is not renewed at the grant.
	proved := false
	for try := 0; try < 5 && !proved; try++ {
		holder, err := l.Acquire(ctx, "a", opts)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := dlock.Open(ctx, s.URL+prefix)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		var waiter *dlock.Lease
		go func() {
			var err error
			waiter, err = l2.Acquire(ctx, "a", opts)
			if err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}()
		time.Sleep(300 * time.Millisecond)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		at := <-got
		if waiter == nil {
			l2.Close()
			t.FailNow()
		}
		ok, prompt := wholeTTLLeft(at)
		if prompt && !ok {
			t.Errorf("a waiter granted 300ms after it queued: the server holds its etcd lease less than the TTL (%ds) from the grant", ttl)
		}
		proved = prompt
		if err := waiter.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l2.Close()
	}
	if !proved {
		t.Logf("a waiter: no look within 50ms of the grant in 5 tries (a loaded machine)")
	}
}

// TestSparesNextWake: the renewing goroutine's next wake-up counts the
// spares taken since it last looked, so that a spare put back after use
// (due when it was before) does not wake it: with the only spare taken,
// the next wake-up is that spare's due, not an hour away (a lock taken
// and released over and over woke the goroutine on every release). A
// taken spare whose due has passed, and a kept one due earlier, still
// decide; the taken ones are forgotten once looked at.
func TestSparesNextWake(t *testing.T) {
	now := time.Now()
	p := &spares{free: map[int64][]spare{}}
	sp := spare{id: 1, ttl: 9, renewed: now.Add(-time.Second)} // due in 2s
	p.free[9] = []spare{sp}
	if got, ok := p.take(9); !ok || got.id != 1 {
		t.Fatalf("take: %v %v", got, ok)
	}
	if got, want := p.nextWakeLocked(now), sp.due(); !got.Equal(want) {
		t.Fatalf("with the only spare taken, next wake-up %v from now, want its due, %v", got.Sub(now), want.Sub(now))
	}
	if got := p.nextWakeLocked(now); !got.Equal(now.Add(time.Hour)) {
		t.Fatalf("the taken spare was not forgotten once looked at: next wake-up %v from now", got.Sub(now))
	}
	// A put of the spare now finds next at its due: no wake-up.
	p.next = sp.due()
	if sp.due().Before(p.next) {
		t.Fatal("the put would wake the renewer")
	}
	// A kept spare due earlier decides; a taken one already due does not.
	early := spare{id: 2, ttl: 3, renewed: now.Add(-500 * time.Millisecond)} // due in 0.5s
	p.free[3] = []spare{early}
	p.takenDue = now.Add(-time.Second)
	if got := p.nextWakeLocked(now); !got.Equal(early.due()) {
		t.Fatalf("next wake-up %v from now, want the kept spare's due, %v", got.Sub(now), early.due().Sub(now))
	}
}
