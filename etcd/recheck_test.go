package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestLeaseLostWhileWaiting is Jepsen's etcd 3.4.3 finding: a waiter whose
// etcd lease ends while it waits (here revoked behind its back) must not be
// granted on its dead key when the holder releases; it queues again with a
// new lease and is granted on a live key, with a new, greater token. With
// a TTL of 3s the grant renews the lease (which fails); with 10s the
// waiter's lease, renewed under a second ago, is not renewed (the spare
// second), and the check of our key after the predecessor's delete (a
// serializable read, grantWaited) is what finds it gone.
func TestLeaseLostWhileWaiting(t *testing.T) {
	for _, ttl := range []time.Duration{3 * time.Second, 10 * time.Second} {
		t.Run(ttl.String(), func(t *testing.T) { testLeaseLostWhileWaiting(t, ttl) })
	}
}

// openFresh opens a Locker on the test server under a fresh prefix named
// after what, closed at the end of the test, with a context of a minute.
func openFresh(t *testing.T, what string) (context.Context, *testenv.Server, string, *dlock.Locker) {
	t.Helper()
	s := testenv.Etcd(t)
	ctx := testenv.Context(t, time.Minute)
	prefix := fmt.Sprintf("/dlocktest/%s-%d", what, time.Now().UnixNano())
	l, err := dlock.Open(ctx, s.URL+prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return ctx, s, prefix, l
}

func testLeaseLostWhileWaiting(t *testing.T, ttl time.Duration) {
	ctx, s, prefix, l := openFresh(t, "recheck")
	a, err := l.Acquire(ctx, "n", &dlock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		lease *dlock.Lease
		err   error
	}
	got := make(chan res, 1)
	go func() {
		b, err := l.Acquire(ctx, "n", &dlock.AcquireOptions{TTL: ttl})
		got <- res{b, err}
	}()
	// The waiter's key: the second of the queue.
	var waiter queueKV
	q := layout.EtcdQueue(prefix, "n")
	for waiter.Lease == "" {
		if kvs := rangeKeys(t, ctx, s.Addr, q); len(kvs) == 2 {
			waiter = kvs[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := testenv.EtcdCall(ctx, s.Addr, "/v3/lease/revoke", map[string]string{"ID": waiter.Lease}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.lease.Release(ctx)
	dead, _ := strconv.ParseUint(waiter.CreateRevision, 10, 64)
	if tok := r.lease.Token(); tok <= dead || tok <= a.Token() {
		t.Errorf("granted with token %d: the dead key's revision is %d, the holder's %d", tok, dead, a.Token())
	}
	info, err := l.Inspect(ctx, "n")
	if err != nil || !info.Held || info.Fence != r.lease.Token() || info.Waiters != 0 || info.TTL <= 0 {
		t.Errorf("Inspect = %+v, %v; want held by token %d with a TTL, no waiters", info, err, r.lease.Token())
	}
	select {
	case <-r.lease.Done():
		t.Fatalf("the new lease ended: %v", r.lease.Err())
	default:
	}
}

// TestPredecessorGoneBeforeWatch: a waiter's predecessor deleted after
// enqueue read it and before the waiter's watch starts (the revision moved
// on: the watch does not cover the delete) is found gone by the look after
// the server's notice, and the waiter is granted; a waiter that trusted
// the watch alone would wait forever.
func TestPredecessorGoneBeforeWatch(t *testing.T) {
	ctx, _, _, l := openFresh(t, "gone")
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	a, err := l.Acquire(ctx, "n", opts)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	testBeforeWatch = func() {
		testBeforeWatch = nil // the first watch only
		released <- a.Release(ctx)
	}
	defer func() { testBeforeWatch = nil }()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := l.Acquire(wctx, "n", opts)
	if err != nil {
		t.Fatalf("the waiter whose predecessor left before its watch: %v", err)
	}
	defer b.Release(ctx)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Errorf("token %d after %d", b.Token(), a.Token())
	}
}

// waitQueued waits until the queue of name holds n keys.
func waitQueued(t *testing.T, ctx context.Context, addr, prefix, name string, n int) {
	t.Helper()
	for len(rangeKeys(t, ctx, addr, layout.EtcdQueue(prefix, name))) != n {
		if ctx.Err() != nil {
			t.Fatalf("queue of %s: never %d keys", name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// acquireAsync acquires name with l in a goroutine; the channel gets the
// lease, or nil after an error (reported).
func acquireAsync(t *testing.T, ctx context.Context, l *dlock.Locker, name string, opts *dlock.AcquireOptions) <-chan *dlock.Lease {
	got := make(chan *dlock.Lease, 1)
	go func() {
		ls, err := l.Acquire(ctx, name, opts)
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	return got
}

// TestGrantWithoutRead: a waiter that knows every key ahead of it (here
// the holder's) is granted on the holder's delete, seen by its watch,
// without a read: the release's delete is the only request from the
// release to the grant. (A watch created after a write to the server
// looks once, legitimately: the case is tried up to three times.)
func TestGrantWithoutRead(t *testing.T) {
	ctx, s, prefix, l := openFresh(t, "noread")
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	var txn, rng, del float64
	for range 3 {
		h, err := l.Acquire(ctx, "n", opts)
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(t, ctx, l, "n", opts)
		waitQueued(t, ctx, s.Addr, prefix, "n", 2)
		time.Sleep(50 * time.Millisecond) // the waiter's watch is created
		before := etcdRequests(t, s.Addr)
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w := <-got
		if w == nil {
			return
		}
		after := etcdRequests(t, s.Addr)
		if w.Token() <= h.Token() {
			t.Errorf("token %d after %d", w.Token(), h.Token())
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		txn, rng, del = after["Txn"]-before["Txn"], after["Range"]-before["Range"], after["DeleteRange"]-before["DeleteRange"]
		if txn == 0 && rng == 0 && del == 1 {
			return
		}
	}
	t.Errorf("from the release to the grant: %v transactions, %v reads and %v deletes, want the release's delete alone", txn, rng, del)
}

// TestWaiterBehindCancelled: a waiter that watches every key ahead of it
// is not granted when a waiter between it and the holder gives up (a
// delete of one key ahead, not the last), only when the holder releases.
// (Three Lockers: one Locker queues its own waiters of a name locally.)
func TestWaiterBehindCancelled(t *testing.T) {
	ctx, s, prefix, l := openFresh(t, "behind")
	other := func() *dlock.Locker {
		o, err := dlock.Open(ctx, s.URL+prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { o.Close() })
		return o
	}
	la, lw := other(), other()
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	h, err := l.Acquire(ctx, "n", opts)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	aDone := make(chan error, 1)
	go func() {
		_, err := la.Acquire(actx, "n", opts)
		aDone <- err
	}()
	waitQueued(t, ctx, s.Addr, prefix, "n", 2)
	got := acquireAsync(t, ctx, lw, "n", opts)
	waitQueued(t, ctx, s.Addr, prefix, "n", 3)
	time.Sleep(50 * time.Millisecond) // the waiters' watches are created
	cancelA()
	if err := <-aDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled waiter: %v", err)
	}
	waitQueued(t, ctx, s.Addr, prefix, "n", 2)
	select {
	case w := <-got:
		t.Fatalf("granted while the holder holds (token %d, the holder's %d)", w.Token(), h.Token())
	case <-time.After(300 * time.Millisecond):
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w := <-got; w != nil {
		defer w.Release(ctx)
		if w.Token() <= h.Token() {
			t.Errorf("token %d after %d", w.Token(), h.Token())
		}
	}
}
