package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/memory"
)

// counting wraps a driver and counts its calls; it exposes only
// TryAcquire (no Blocker) unless block is set, so the portable layer's own
// wait loop is exercised.
type counting struct {
	driver.Locker
	block       bool
	tries       atomic.Int64
	refreshErr  atomic.Value // error returned by Refresh instead of calling the driver
	hang        atomic.Pointer[hang]
	refreshes   atomic.Int64
	releases    atomic.Int64
	acquireCall atomic.Int64
}

// hang makes the Refresh of the lease called name block, ignoring its
// context (a driver that does not honour it), until until is closed, then
// report success without asking the server.
type hang struct {
	name     string
	until    chan struct{}
	started  atomic.Int64
	returned atomic.Int64
}

type countingLease struct {
	driver.Lease
	c    *counting
	name string
}

func (c *counting) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	c.tries.Add(1)
	dl, err := c.Locker.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &countingLease{dl, c, req.Name}, nil
}

func (cl *countingLease) Refresh(ctx context.Context, ttl time.Duration) error {
	cl.c.refreshes.Add(1)
	if h := cl.c.hang.Load(); h != nil && h.name == cl.name {
		h.started.Add(1)
		<-h.until
		h.returned.Add(1)
		return nil
	}
	if e, _ := cl.c.refreshErr.Load().(error); e != nil {
		return e
	}
	return cl.Lease.Refresh(ctx, ttl)
}

func (cl *countingLease) Release(ctx context.Context) error {
	cl.c.releases.Add(1)
	return cl.Lease.Release(ctx)
}

func newCounting(t *testing.T) (*memory.Namespace, *counting, *dlock.Locker) {
	t.Helper()
	ns := memory.NewNamespace()
	c := &counting{Locker: memory.OpenLocker(ns).Driver()}
	l := dlock.NewLocker(c)
	t.Cleanup(func() { l.Close() })
	return ns, c, l
}

func TestOpenErrors(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	_, err := dlock.Open(ctx, "nosuch://host")
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "forgotten import?") || !strings.Contains(err.Error(), "mem") {
		t.Errorf("unknown scheme: got %v; want ErrInvalidOption listing mem and saying forgotten import?", err)
	}
	for _, raw := range []string{"", "redis", "://x", "127.0.0.1:6379"} {
		if _, err := dlock.Open(ctx, raw); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Open(%q) = %v; want ErrInvalidOption", raw, err)
		}
	}
	if _, err := dlock.Open(ctx, "MEM://"); err != nil {
		t.Errorf("scheme is case-insensitive: %v", err)
	}
}

var errAuth = errors.New("auth failed")

func init() {
	// A driver whose client library echoes the whole URL into its errors,
	// as many do: dlock.Open must scrub the password anyway.
	dlock.Register("leaky", func(ctx context.Context, raw string) (driver.Locker, error) {
		return nil, fmt.Errorf("connect %s: %w", raw, errAuth)
	})
}

func TestOpenNeverPrintsPassword(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	for _, raw := range []string{
		"leaky://alice:s3cr%40t@127.0.0.1:1/x",
		"leaky://alice:hunter2@tcp(127.0.0.1:3306)/db",
		"leaky://127.0.0.1/x?password=hunter2",
		"nosuch://alice:hunter2@127.0.0.1/",
		"alice:hunter2@127.0.0.1",
	} {
		_, err := dlock.Open(ctx, raw)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", raw)
		}
		msg := err.Error()
		for _, secret := range []string{"s3cr%40t", "s3cr@t", "hunter2"} {
			if strings.Contains(msg, secret) {
				t.Errorf("Open error %q contains the password %q", msg, secret)
			}
		}
	}
	_, err := dlock.Open(ctx, "leaky://alice:hunter2@127.0.0.1/x")
	if !errors.Is(err, errAuth) {
		t.Errorf("scrubbed error lost its chain: %v", err)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("second Register of mem did not panic")
		}
	}()
	dlock.Register("mem", func(context.Context, string) (driver.Locker, error) { return nil, nil })
}

func TestBadInputNeverReachesDriver(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	_, c, l := newCounting(t)
	cases := []struct {
		name string
		opts *dlock.AcquireOptions
		want error
	}{
		{"", nil, dlock.ErrInvalidName},
		{"bad\xffutf8", nil, dlock.ErrInvalidName},
		{strings.Repeat("n", dlock.MaxNameLen+1), nil, dlock.ErrInvalidName},
		{"ok", &dlock.AcquireOptions{TTL: -time.Second}, dlock.ErrInvalidOption},
		{"ok", &dlock.AcquireOptions{TTL: 500 * time.Microsecond}, dlock.ErrInvalidOption},
		{"ok", &dlock.AcquireOptions{Owner: "bad\xff"}, dlock.ErrInvalidOption},
	}
	for _, tc := range cases {
		for _, try := range []bool{false, true} {
			var err error
			if try {
				_, err = l.TryAcquire(ctx, tc.name, tc.opts)
			} else {
				_, err = l.Acquire(ctx, tc.name, tc.opts)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("name %.20q opts %+v: err = %v; want %v", tc.name, tc.opts, err, tc.want)
			}
		}
	}
	if n := c.tries.Load(); n != 0 {
		t.Errorf("driver called %d times for bad input; want 0", n)
	}
	// The boundaries themselves are accepted.
	ls, err := l.TryAcquire(ctx, strings.Repeat("n", dlock.MaxNameLen), &dlock.AcquireOptions{TTL: dlock.MinTTL, NoKeepAlive: true})
	if err != nil {
		t.Fatalf("name of MaxNameLen bytes with MinTTL: %v", err)
	}
	ls.Release(ctx)
}

func TestContextErrorsUnwrapped(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns, _, l := newCounting(t)
	holder, err := l.Acquire(ctx, "busy", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "busy", &dlock.AcquireOptions{Owner: "other"}); err != context.DeadlineExceeded {
		t.Errorf("Acquire past deadline = %v; want context.DeadlineExceeded itself", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := l.Acquire(cctx, "busy", nil); err != context.Canceled {
		t.Errorf("Acquire with cancelled ctx = %v; want context.Canceled itself", err)
	}
	// The native (queued) wait leaves no waiter behind either.
	nl := memory.OpenLocker(ns)
	defer nl.Close()
	qctx, qcancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer qcancel()
	if _, err := nl.Acquire(qctx, "busy", nil); err != context.DeadlineExceeded {
		t.Errorf("queued Acquire past deadline = %v", err)
	}
	if w := ns.Waiters("busy"); w != 0 {
		t.Errorf("%d waiters left behind after a cancelled Acquire", w)
	}
}

func TestPollingWaitWakes(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	_, c, l := newCounting(t)
	holder, err := l.TryAcquire(ctx, "p", &dlock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(150 * time.Millisecond)
		holder.Release(context.Background())
	}()
	start := time.Now()
	ls, err := l.Acquire(ctx, "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	waited := time.Since(start)
	// Capped backoff (100ms) bounds the delay after the release.
	if waited > 150*time.Millisecond+time.Second {
		t.Errorf("polling Acquire took %v after a release at 150ms", waited)
	}
	if n := c.tries.Load(); n < 2 || n > 100 {
		t.Errorf("%d tries in %v: backoff not applied", n, waited)
	}
}

func TestPollingWaitUsesRetryAfter(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	_, _, l := newCounting(t)
	// The holder's lease expires after 200ms without a release: the memory
	// driver's NotAcquiredError says so, and the waiter wakes in time.
	if _, err := l.TryAcquire(ctx, "e", &dlock.AcquireOptions{TTL: 200 * time.Millisecond, NoKeepAlive: true}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ls, err := l.Acquire(ctx, "e", nil)
	if err != nil {
		t.Fatal(err)
	}
	ls.Release(ctx)
	if d := time.Since(start); d > 200*time.Millisecond+time.Second {
		t.Errorf("waited %v for a lease that expired at 200ms", d)
	}
}

func TestKeepAliveAndExpiry(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	_, c, l := newCounting(t)
	ttl := 60 * time.Millisecond
	kept, err := l.TryAcquire(ctx, "kept", &dlock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	loose, err := l.TryAcquire(ctx, "loose", &dlock.AcquireOptions{TTL: ttl, NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * ttl)
	if err := kept.Err(); err != nil {
		t.Errorf("kept-alive lease ended: %v", err)
	}
	if c.refreshes.Load() < 3 {
		t.Errorf("%d refreshes in 6 TTLs; want about 18", c.refreshes.Load())
	}
	select {
	case <-loose.Done():
		if !errors.Is(loose.Err(), dlock.ErrLockLost) {
			t.Errorf("expired lease Err = %v; want ErrLockLost", loose.Err())
		}
	default:
		t.Error("lease without keep-alive still open after 6 TTLs")
	}
	if err := loose.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Refresh after expiry = %v; want ErrNotHeld", err)
	}
	if err := loose.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after expiry = %v; want ErrNotHeld", err)
	}
	if err := kept.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	if !errors.Is(kept.Err(), dlock.ErrReleased) {
		t.Errorf("Err after Release = %v; want ErrReleased", kept.Err())
	}
	if err := kept.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Release = %v; want ErrNotHeld", err)
	}
}

// The local deadline ends the lease before the server does, so the old
// holder knows before a new holder can be granted: at the instant of the
// new grant, the old lease's deadline has passed and its Done is closed
// (both read the clock when called, so this does not depend on when a
// goroutine waiting on Done gets scheduled).
func TestDoneBeforeServerRegrants(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns := memory.NewNamespace()
	a, b := memory.OpenLocker(ns), memory.OpenLocker(ns)
	defer a.Close()
	defer b.Close()
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("d%d", i)
		old, err := a.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 50 * time.Millisecond, NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		next, err := b.Acquire(ctx, name, &dlock.AcquireOptions{TTL: time.Second})
		grantAt := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		if dl, ok := old.Deadline(); !ok || !dl.Before(grantAt) {
			t.Errorf("old lease's deadline %v is not before the new grant (%v after it)", dl, dl.Sub(grantAt))
		}
		select {
		case <-old.Done():
		default:
			t.Errorf("old lease's Done is still open after the new grant")
		}
		if !errors.Is(old.Err(), dlock.ErrLockLost) {
			t.Errorf("old lease's Err after the new grant = %v, want ErrLockLost", old.Err())
		}
		if next.Token() <= old.Token() {
			t.Errorf("token %d after %d", next.Token(), old.Token())
		}
		next.Release(ctx)
	}
}

func TestTransientRefreshFailureEndsAtDeadline(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	_, c, l := newCounting(t)
	c.refreshErr.Store(errors.New("network is down"))
	ttl := 90 * time.Millisecond
	start := time.Now()
	ls, err := l.TryAcquire(ctx, "t", &dlock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ls.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease whose refreshes fail never ended")
	}
	if d := time.Since(start); d < ttl/2 {
		t.Errorf("lease ended after %v, before its TTL %v could run out", d, ttl)
	}
	if !errors.Is(ls.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v; want ErrLockLost", ls.Err())
	}
	if c.refreshes.Load() < 2 {
		t.Errorf("transient failure retried %d times; want retries", c.refreshes.Load())
	}
}

// A keep-alive refresh that hangs neither keeps the lease's Done open past
// its deadline nor delays another lease's refresh, and when it finally
// returns success it does not revive the lease.
func TestRefreshHangs(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	_, c, l := newCounting(t)
	hg := &hang{name: "hang", until: make(chan struct{})}
	c.hang.Store(hg)
	defer close(hg.until) // before the Locker's Close (t.Cleanup) waits for it
	hung, err := l.TryAcquire(ctx, "hang", &dlock.AcquireOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := l.TryAcquire(ctx, "ok", &dlock.AcquireOptions{TTL: 90 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hung.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a lease whose refresh hangs was still open 5s after its 600ms TTL")
	}
	dl, _ := hung.Deadline()
	if early := time.Until(dl); early > 0 {
		t.Errorf("Done closed %v before the deadline", early)
	}
	if hg.started.Load() != 1 {
		t.Fatalf("%d refreshes of the lease started; want 1, which hangs", hg.started.Load())
	}
	if !errors.Is(hung.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v; want ErrLockLost", hung.Err())
	}
	if err := ok.Err(); err != nil {
		t.Errorf("another lease ended while one refresh hung (refreshes serialised?): %v", err)
	}
	hg.until <- struct{}{} // the hung refresh returns success, late
	for hg.returned.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if !errors.Is(hung.Err(), dlock.ErrLockLost) {
		t.Errorf("a refresh that returned after the deadline revived the lease: Err = %v", hung.Err())
	}
	if dl2, _ := hung.Deadline(); !dl2.Equal(dl) {
		t.Errorf("a refresh that returned after the deadline moved it by %v", dl2.Sub(dl))
	}
	if err := ok.Release(ctx); err != nil {
		t.Errorf("the other lease: %v", err)
	}
}

// Leases share their Locker's one keep-alive goroutine: 1000 leases (on
// the memory driver, whose leases report loss by callback) add a goroutine
// or so, not 1000, and Close leaves none behind.
func TestLeasesShareOneGoroutine(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	l, err := dlock.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, 1000)
	for i := range leases {
		if leases[i], err = l.TryAcquire(ctx, fmt.Sprintf("g/%d", i), &dlock.AcquireOptions{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if d := runtime.NumGoroutine() - before; d > 10 {
		t.Errorf("1000 leases added %d goroutines", d)
	}
	for _, ls := range leases[:500] {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ls := range leases[500:] {
		if !errors.Is(ls.Err(), dlock.ErrClosed) {
			t.Fatalf("a lease after Close: %v; want ErrClosed", ls.Err())
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close; %d before the leases", n, before)
	}
}

func TestReentrancy(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns, _, l := newCounting(t)
	other := memory.OpenLocker(ns)
	defer other.Close()
	own := &dlock.AcquireOptions{Owner: "job-7"}
	outer, err := l.Acquire(ctx, "r", own)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := l.TryAcquire(ctx, "r", own)
	if err != nil {
		t.Fatalf("reentrant TryAcquire: %v", err)
	}
	if inner.Token() != outer.Token() {
		t.Errorf("reentrant token %d != %d", inner.Token(), outer.Token())
	}
	if _, err := l.TryAcquire(ctx, "r", &dlock.AcquireOptions{Owner: "someone-else"}); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("another owner on the same Locker: %v; want ErrNotAcquired", err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx, "r", nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("lock freed after the first of two releases: %v", err)
	}
	if err := inner.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("releasing the same inner lease twice: %v; want ErrNotHeld", err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err := other.TryAcquire(ctx, "r", nil)
	if err != nil {
		t.Fatalf("lock not freed by the last release: %v", err)
	}
	ls.Release(ctx)

	// Concurrent acquisitions by one owner join one hold.
	var wg sync.WaitGroup
	leases := make([]*dlock.Lease, 16)
	for i := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			leases[i], err = l.Acquire(ctx, "r2", own)
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, ls := range leases[1:] {
		if ls.Token() != leases[0].Token() {
			t.Fatalf("same owner got two grants: tokens %d and %d", ls.Token(), leases[0].Token())
		}
	}
	for _, ls := range leases {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ns.Held("r2") {
		t.Error("lock still held after every reentrant release")
	}
}

func TestClose(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns, c, l := newCounting(t)
	ls, err := l.Acquire(ctx, "c", &dlock.AcquireOptions{TTL: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case <-ls.Done():
	default:
		t.Fatal("lease still open after Close")
	}
	if !errors.Is(ls.Err(), dlock.ErrClosed) {
		t.Errorf("Err after Close = %v; want ErrClosed", ls.Err())
	}
	if ns.Held("c") {
		t.Error("Close left the lock held on the server")
	}
	n := c.refreshes.Load()
	time.Sleep(100 * time.Millisecond)
	if c.refreshes.Load() != n {
		t.Error("keep-alive still refreshing after Close")
	}
	if _, err := l.Acquire(ctx, "c", nil); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Acquire after Close = %v", err)
	}
	if _, err := l.TryAcquire(ctx, "c", nil); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryAcquire after Close = %v", err)
	}
	if _, err := l.Inspect(ctx, "c"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Inspect after Close = %v", err)
	}
	if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after Close = %v; want ErrNotHeld", err)
	}
}

func TestReleaseWithCancelledContext(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns, _, l := newCounting(t)
	ls, err := l.Acquire(ctx, "rc", nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := ls.Release(cctx); err != nil {
		t.Errorf("Release with a cancelled context: %v", err)
	}
	if ns.Held("rc") {
		t.Error("lock still held")
	}
}

func TestLeaseContextAndDo(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns := memory.NewNamespace()
	l := memory.OpenLocker(ns)
	defer l.Close()

	err := dlock.Do(ctx, l, "do", nil, func(ctx context.Context, lease *dlock.Lease) error {
		ns.Revoke("do")
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
			t.Errorf("lease context cause = %v; want ErrLockLost", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Do after a loss = %v; want ErrLockLost", err)
	}

	boom := errors.New("boom")
	if err := dlock.Do(ctx, l, "do", nil, func(context.Context, *dlock.Lease) error { return boom }); err != boom {
		t.Errorf("Do returned %v; want fn's error", err)
	}
	func() {
		defer func() { recover() }()
		dlock.Do(ctx, l, "do", nil, func(context.Context, *dlock.Lease) error { panic("x") })
	}()
	if ns.Held("do") {
		t.Error("Do left the lock held after fn panicked")
	}
}

func TestInspect(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	l, _ := dlock.Open(ctx, "mem://")
	defer l.Close()
	ls, err := l.Acquire(ctx, "i", &dlock.AcquireOptions{Owner: "host-a"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.Inspect(ctx, "i")
	if err != nil || !info.Held || info.Owner != "host-a" || info.Fence != ls.Token() || info.TTL <= 0 {
		t.Errorf("Inspect = %+v, %v", info, err)
	}
	ls.Release(ctx)
	if info, _ := l.Inspect(ctx, "i"); info.Held {
		t.Errorf("Inspect after release = %+v", info)
	}
}

func TestCloseEndsWaiters(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	for _, native := range []bool{true, false} {
		ns := heldNamespace(t, ctx, "w")
		closeEndsAcquires(t, ctx, ns, native, "w", 1, func() { time.Sleep(50 * time.Millisecond) })
		if w := ns.Waiters("w"); w != 0 {
			t.Errorf("native=%v: %d waiters left after Close", native, w)
		}
	}
}

// TestCloseRacingAcquires closes Lockers while their Acquire calls are
// starting to wait: every call returns (ErrClosed), whether it registered
// its wait before Close ended the registered ones or after.
func TestCloseRacingAcquires(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	for _, native := range []bool{true, false} {
		ns := heldNamespace(t, ctx, "cr")
		for i := range 200 {
			closeEndsAcquires(t, ctx, ns, native, "cr", 4, func() {
				if i%2 == 0 {
					runtime.Gosched()
				}
			})
		}
		if w := ns.Waiters("cr"); w != 0 {
			t.Errorf("native=%v: %d waiters left after Close", native, w)
		}
	}
}

// heldNamespace returns a memory namespace whose lock name another Locker
// holds until the test ends.
func heldNamespace(t *testing.T, ctx context.Context, name string) *memory.Namespace {
	t.Helper()
	ns := memory.NewNamespace()
	holder := memory.OpenLocker(ns)
	t.Cleanup(func() { holder.Close() })
	if _, err := holder.Acquire(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	return ns
}

// closeEndsAcquires starts n Acquire calls of name on a new Locker of ns
// (the driver's native queue, or the portable layer's polling when native
// is false), runs settle, closes the Locker and checks that every call
// ends with ErrClosed.
func closeEndsAcquires(t *testing.T, ctx context.Context, ns *memory.Namespace, native bool, name string, n int, settle func()) {
	t.Helper()
	var l *dlock.Locker
	if native {
		l = memory.OpenLocker(ns)
	} else {
		l = dlock.NewLocker(&counting{Locker: memory.OpenLocker(ns).Driver()})
	}
	errc := make(chan error, n)
	for range n {
		go func() {
			_, err := l.Acquire(ctx, name, nil)
			errc <- err
		}()
	}
	settle()
	l.Close()
	for range n {
		select {
		case err := <-errc:
			if !errors.Is(err, dlock.ErrClosed) {
				t.Fatalf("native=%v: Acquire ended by Close = %v; want ErrClosed", native, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("native=%v: Close did not end an Acquire", native)
		}
	}
}

func TestReentrantReleaseAfterLoss(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns := memory.NewNamespace()
	l := memory.OpenLocker(ns)
	defer l.Close()
	own := &dlock.AcquireOptions{Owner: "x"}
	outer, _ := l.Acquire(ctx, "rl", own)
	inner, err := l.Acquire(ctx, "rl", own)
	if err != nil {
		t.Fatal(err)
	}
	ns.Revoke("rl")
	<-outer.Done()
	if err := inner.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("inner Release of a lost reentrant lease = %v; want ErrNotHeld", err)
	}
	if err := outer.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("outer Release of a lost lease = %v; want ErrNotHeld", err)
	}
}

func TestTryAcquireNeverWaitsBehindOwnAcquire(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns := memory.NewNamespace()
	l, other := memory.OpenLocker(ns), memory.OpenLocker(ns)
	defer l.Close()
	defer other.Close()
	held, _ := other.Acquire(ctx, "tw", nil)
	own := &dlock.AcquireOptions{Owner: "x"}
	go l.Acquire(ctx, "tw", own) // blocks behind other
	for ns.Waiters("tw") == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if _, err := l.TryAcquire(ctx, "tw", own); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire = %v; want ErrNotAcquired", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("TryAcquire waited %v behind the owner's own Acquire", d)
	}
	held.Release(ctx)
}

// TestInspectUnsupported: a driver without driver.Inspector answers
// Inspect with ErrUnsupported naming the backend; a bad name is still
// refused first, and a closed Locker says so.
func TestInspectUnsupported(t *testing.T) {
	ctx := testenv.Context(t, 10*time.Second)
	_, _, l := newCounting(t) // counting hides the memory driver's Inspect
	_, err := l.Inspect(ctx, "x")
	if !errors.Is(err, dlock.ErrUnsupported) || !strings.Contains(err.Error(), "memory") {
		t.Fatalf("Inspect without an Inspector: %v, want ErrUnsupported naming the backend", err)
	}
	if _, err := l.Inspect(ctx, ""); !errors.Is(err, dlock.ErrInvalidName) {
		t.Fatalf("Inspect of an empty name: %v, want ErrInvalidName", err)
	}
	l.Close()
	if _, err := l.Inspect(ctx, "x"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Inspect after Close: %v, want ErrClosed", err)
	}
}

// An uncontended acquire+release cycle costs the keep-alive scheduler
// nothing beyond its heap: the first hold arms its timer, later holds
// whose events come after the armed time leave it alone, and a release
// does not disarm it. (Before, each arm woke the keeper's goroutine; it
// ran after the release, found the heap empty and disarmed, so that
// nearly every acquire in a busy process woke it again: a scheduler trip
// on the caller's path.) The Gosched after each release lets such a
// goroutine run, as the network wait of a real release does.
func TestCycleArmsKeeperOnce(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	l, err := dlock.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	opts := &dlock.AcquireOptions{TTL: time.Minute}
	for i := range 2000 {
		ls, err := l.Acquire(ctx, "cycle", opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
		if i == 0 && dlock.KeeperArms(l) != 1 {
			t.Fatalf("the first hold armed the keeper %d times; want 1", dlock.KeeperArms(l))
		}
	}
	if n := dlock.KeeperArms(l); n > 1 {
		t.Errorf("2000 cycles armed the keeper %d times; want 1 (the first hold's)", n)
	}
}
