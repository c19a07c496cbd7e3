package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestQueueWatchKept: in a handoff among a few Lockers, a waiter takes up
// its Locker's kept watch of the queue rather than creating one per wait:
// a watch created per wait (2 Watch messages a grant, the creation and its
// cancel) raced the server's writes, and etcd then sent its events only at
// its next 100ms catch-up (BenchmarkHandoffStalls).
func TestQueueWatchKept(t *testing.T) {
	const lockers, grants = 3, 150
	ctx, s, prefix, _ := openFresh(t, "kept")
	ls := openLockers(t, s, prefix, lockers)
	handoff(ctx, t, ls, lockers, time.Millisecond, nil) // the watches are created
	before := etcdRequests(t, s.Addr)
	handoff(ctx, t, ls, grants, time.Millisecond, nil)
	after := etcdRequests(t, s.Addr)
	if n := after["Watch"] - before["Watch"]; n > lockers {
		t.Errorf("%v Watch messages in %d grants among %d Lockers, want at most one per Locker", n, grants, lockers)
	}
}

// TestKeptWatchReplaysDelete: a waiter that takes up a kept watch after
// the delete that grants it was delivered on that watch (the holder
// released between the waiter's enqueue and its watch) is granted from
// the deletes the watch keeps, without a read; one that ignored them
// would wait for a delete that has come already.
func TestKeptWatchReplaysDelete(t *testing.T) {
	ctx, s, prefix, a := openFresh(t, "replay")
	b := openLockers(t, s, prefix, 1)[0]
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	h, err := a.Acquire(ctx, "r", opts)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, ctx, b, "r", opts) // creates b's kept watch
	waitQueued(t, ctx, s.Addr, prefix, "r", 2)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		return
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h, err = a.Acquire(ctx, "r", opts); err != nil {
		t.Fatal(err)
	}
	var before map[string]float64
	testBeforeWatch = func() {
		testBeforeWatch = nil
		before = etcdRequests(t, s.Addr)
		if err := h.Release(ctx); err != nil {
			t.Error(err)
		}
		time.Sleep(50 * time.Millisecond) // the delete reaches b's watch
	}
	defer func() { testBeforeWatch = nil }()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err = b.Acquire(wctx, "r", opts)
	if err != nil {
		t.Fatalf("the waiter whose holder left before it took up the kept watch: %v", err)
	}
	after := etcdRequests(t, s.Addr)
	if w.Token() <= h.Token() {
		t.Errorf("token %d after %d", w.Token(), h.Token())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if txn, rng := after["Txn"]-before["Txn"], after["Range"]-before["Range"]; txn != 0 || rng != 0 {
		t.Errorf("from the release to the grant: %v transactions and %v reads, want none", txn, rng)
	}
}
