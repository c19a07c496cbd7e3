package dlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// These tests check rules of the portable layer that no backend can
// break, on a minimal in-process driver (the memory driver imports this
// package, so it cannot be used here). stubDriver grants every name to one
// holder at a time and never expires anything; its Release blocks until
// ctx ends when blockRelease is set (a frozen server).
type stubDriver struct {
	caps         driver.Capabilities
	blockRelease bool
	onRelease    func(ctx context.Context) // called first by every Release

	mu       sync.Mutex
	held     map[string]uint64
	token    uint64
	tries    int
	watchers map[chan struct{}]string // woken by a release of their name
}

type stubLease struct {
	d     *stubDriver
	name  string
	token uint64
}

func newStub() *stubDriver {
	return &stubDriver{held: map[string]uint64{}, caps: driver.Capabilities{Backend: "stub", Fencing: true, Wait: driver.WaitPoll, ReleaseOnCrash: driver.ReleaseAfterTTL}}
}

func (d *stubDriver) Capabilities() driver.Capabilities { return d.caps }
func (d *stubDriver) Close() error                      { return nil }

func (d *stubDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tries++
	if _, ok := d.held[req.Name]; ok {
		return nil, driver.ErrNotAcquired
	}
	d.token++
	d.held[req.Name] = d.token
	return &stubLease{d, req.Name, d.token}, nil
}

func (ls *stubLease) Token() uint64         { return ls.token }
func (ls *stubLease) Lost() <-chan struct{} { return nil }
func (ls *stubLease) Refresh(context.Context, time.Duration) error {
	return nil
}

func (ls *stubLease) Release(ctx context.Context) error {
	if f := ls.d.onRelease; f != nil {
		f(ctx)
	}
	if ls.d.blockRelease {
		<-ctx.Done()
		return ctx.Err()
	}
	ls.d.mu.Lock()
	defer ls.d.mu.Unlock()
	if ls.d.held[ls.name] != ls.token {
		return driver.ErrNotHeld
	}
	delete(ls.d.held, ls.name)
	for ch, name := range ls.d.watchers {
		if name == ls.name {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// watchingStub is stubDriver with a Watcher: a release wakes the watches
// registered at that moment. beforeWatch runs in Watch before the watch
// is registered.
type watchingStub struct {
	*stubDriver
	beforeWatch func()
	watches     int
}

func (w *watchingStub) Watch(ctx context.Context, req driver.Request) (<-chan struct{}, func(), error) {
	w.mu.Lock()
	w.watches++
	hook := w.beforeWatch
	w.mu.Unlock()
	if hook != nil {
		hook()
	}
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.watchers == nil {
		w.watchers = map[chan struct{}]string{}
	}
	w.watchers[ch] = req.Name
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.watchers, ch)
		w.mu.Unlock()
	}, nil
}

func (w *watchingStub) watchCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.watches
}

// A waiter watches only after a failed try, and tries again once the
// watch is registered: a release between the failed try and the Watch
// (which wakes nobody) still lets it in. The fallback timer is an hour
// here, so only that second try, or a wake-up, can grant the lock.
func TestWatchAfterFailedTry(t *testing.T) {
	w := &watchingStub{stubDriver: newStub()}
	l := NewLocker(w)
	defer l.Close()
	l.watchLo, l.watchHi = time.Hour, time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	free, err := l.Acquire(ctx, "free", nil)
	if err != nil {
		t.Fatal(err)
	}
	free.Release(ctx)
	if n := w.watchCount(); n != 0 {
		t.Errorf("an Acquire of a free lock called Watch %d times; want none", n)
	}

	// The holder is another client: a sibling of the waiter's own Locker
	// would keep it in the Locker's queue, away from the driver.
	other := NewLocker(w)
	defer other.Close()
	holder, err := other.TryAcquire(ctx, "a", &AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.beforeWatch = func() { holder.Release(context.Background()) }
	w.mu.Unlock()
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	ls, err := l.Acquire(wctx, "a", nil)
	if err != nil {
		t.Fatalf("a release between the failed try and the Watch was missed: %v", err)
	}
	ls.Release(ctx)
	if n := w.watchCount(); n != 1 {
		t.Errorf("Watch called %d times; want 1", n)
	}

	// The ordinary case: a release after the waiter waits wakes it.
	w.mu.Lock()
	w.beforeWatch = nil
	w.mu.Unlock()
	holder, err = other.TryAcquire(ctx, "a", &AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for w.watchCount() < 2 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		holder.Release(context.Background())
	}()
	ls, err = l.Acquire(wctx, "a", nil)
	if err != nil {
		t.Fatalf("a waiter was not woken by a release: %v", err)
	}
	ls.Release(ctx)
}

// pause makes the hold's deadline pass without its goroutine running: the
// state of a process that was stopped past its TTL, in the first instant
// after it resumes.
func pause(ls *Lease) {
	ls.h.mu.Lock()
	ls.h.deadline = time.Now().Add(-time.Millisecond)
	ls.h.mu.Unlock()
}

// Kleppmann's pause: everything that reports the lease held reads the clock
// at the call, not a field a timer goroutine sets later.
func TestLeaseReadsClockAtCall(t *testing.T) {
	for _, probe := range []struct {
		name string
		lost func(*Lease) bool
	}{
		{"Err", func(ls *Lease) bool { return errors.Is(ls.Err(), ErrLockLost) }},
		{"Done", func(ls *Lease) bool {
			select {
			case <-ls.Done():
				return true
			default:
				return false
			}
		}},
		{"Context.Err", func(ls *Lease) bool {
			ctx, cancel := ls.Context(context.Background())
			defer cancel()
			return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrLockLost)
		}},
		{"Context.Done", func(ls *Lease) bool {
			ctx, cancel := ls.Context(context.Background())
			defer cancel()
			select {
			case <-ctx.Done():
				return true
			default:
				return false
			}
		}},
		{"Refresh", func(ls *Lease) bool { return errors.Is(ls.Refresh(context.Background()), ErrNotHeld) }},
		{"Release", func(ls *Lease) bool { return errors.Is(ls.Release(context.Background()), ErrNotHeld) }},
	} {
		t.Run(probe.name, func(t *testing.T) {
			l := NewLocker(newStub())
			defer l.Close()
			ls, err := l.TryAcquire(context.Background(), "a", &AcquireOptions{TTL: time.Hour, NoKeepAlive: true})
			if err != nil {
				t.Fatal(err)
			}
			pause(ls)
			if !probe.lost(ls) {
				t.Fatalf("%s reports the lease held in the first instant after its deadline passed", probe.name)
			}
		})
	}
}

// A reentrant Acquire never joins a hold whose deadline has passed.
func TestReentrantJoinChecksDeadline(t *testing.T) {
	l := NewLocker(newStub())
	defer l.Close()
	opts := &AcquireOptions{TTL: time.Hour, NoKeepAlive: true, Owner: "me"}
	ls, err := l.TryAcquire(context.Background(), "a", opts)
	if err != nil {
		t.Fatal(err)
	}
	pause(ls)
	if again, err := l.TryAcquire(context.Background(), "a", opts); err == nil {
		t.Fatalf("a reentrant TryAcquire joined a hold past its deadline (token %d)", again.Token())
	}
}

// A TTL outside the backend's declared range is refused, naming the range,
// before the driver is called.
func TestTTLOutsideDeclaredRange(t *testing.T) {
	d := newStub()
	d.caps.MinTTL, d.caps.MaxTTL = time.Second, time.Hour
	l := NewLocker(d)
	defer l.Close()
	for _, ttl := range []time.Duration{-1, 1, MinTTL, time.Second - 1, time.Hour + 1, 1<<63 - 1} {
		_, err := l.TryAcquire(context.Background(), "a", &AcquireOptions{TTL: ttl})
		if !errors.Is(err, ErrInvalidOption) {
			t.Errorf("TTL %v: %v, want ErrInvalidOption", ttl, err)
		}
	}
	_, err := l.TryAcquire(context.Background(), "a", &AcquireOptions{TTL: time.Hour + 1})
	if msg := err.Error(); !strings.Contains(msg, "1s") || !strings.Contains(msg, "1h0m0s") {
		t.Errorf("the error does not name the range: %s", msg)
	}
	if d.tries != 0 {
		t.Errorf("the driver was called %d times for refused TTLs", d.tries)
	}
	for _, ttl := range []time.Duration{time.Second, time.Hour} {
		ls, err := l.TryAcquire(context.Background(), "ok", &AcquireOptions{TTL: ttl})
		if err != nil {
			t.Fatalf("TTL %v within the range: %v", ttl, err)
		}
		ls.Release(context.Background())
	}
	// Below the portable minimum, whatever the backend declares.
	d2 := newStub()
	d2.caps.MinTTL = time.Millisecond
	l2 := NewLocker(d2)
	defer l2.Close()
	if _, err := l2.TryAcquire(context.Background(), "a", &AcquireOptions{TTL: 2 * time.Millisecond}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a 2ms TTL (less validity than drift) was accepted: %v", err)
	}
}

// Every release reaches the driver bounded: by ReleaseTimeout when the
// caller's context has no deadline (context.Background() included, whose
// releases share a bounded context: then within the last tenth of it), by
// the caller's deadline when sooner, by a fresh bounded context when the
// caller's had ended; the caller's values reach the driver.
func TestReleaseContextIsBounded(t *testing.T) {
	type key struct{}
	d := newStub()
	var got context.Context
	var gotErr error // got's, as the driver's release began
	d.onRelease = func(ctx context.Context) { got, gotErr = ctx, ctx.Err() }
	l := NewLocker(d)
	defer l.Close()
	near, cancelNear := context.WithTimeout(context.Background(), time.Second)
	defer cancelNear()
	far, cancelFar := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Hour)
	defer cancelFar()
	ended, cancelEnded := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	cancelEnded()
	cases := []struct {
		name   string
		ctx    context.Context
		lo, hi time.Duration // the deadline's distance from the release
		value  bool
	}{
		{"background", context.Background(), ReleaseTimeout - releaseReuse - 50*time.Millisecond, ReleaseTimeout, false},
		{"todo", context.TODO(), ReleaseTimeout - releaseReuse - 50*time.Millisecond, ReleaseTimeout, false},
		{"value, no deadline", context.WithValue(context.Background(), key{}, "v"), ReleaseTimeout - 50*time.Millisecond, ReleaseTimeout, true},
		{"far deadline", far, ReleaseTimeout - 50*time.Millisecond, ReleaseTimeout, true},
		{"near deadline", near, 0, time.Second, false},
		{"ended", ended, ReleaseTimeout - 50*time.Millisecond, ReleaseTimeout, true},
	}
	for i := 0; i < 4; i++ { // the shared context, made, reused and made anew
		for _, c := range cases {
			ls, err := l.TryAcquire(context.Background(), "a", nil)
			if err != nil {
				t.Fatal(err)
			}
			got = nil
			start := time.Now()
			if err := ls.Release(c.ctx); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			dl, ok := got.Deadline()
			if !ok {
				t.Fatalf("%s: the driver's release had no deadline", c.name)
			}
			if left := dl.Sub(start); left < c.lo || left > c.hi+50*time.Millisecond {
				t.Errorf("%s: the driver's release was bounded %v after it began; want %v to %v", c.name, left, c.lo, c.hi)
			}
			if err := gotErr; err != nil {
				t.Errorf("%s: the driver's release context had ended: %v", c.name, err)
			}
			if c.value && got.Value(key{}) != "v" {
				t.Errorf("%s: the caller's value did not reach the driver", c.name)
			}
		}
		time.Sleep(releaseReuse / 2)
	}
}

// Do's release ends by the caller's deadline even when the server does
// not answer.
func TestDoReleaseHonoursDeadline(t *testing.T) {
	d := newStub()
	d.blockRelease = true
	l := NewLocker(d)
	defer func() {
		d.blockRelease = false
		l.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- Do(ctx, l, "a", nil, func(context.Context, *Lease) error { return nil })
	}()
	select {
	case err := <-done:
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("Do returned after %v for a 300ms context", el)
		}
		t.Logf("Do with a frozen release returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatal("Do with a 300ms context was still blocked in its release after 10s")
	}
}

// The portable layer's own duration arithmetic never overflows: for every
// TTL it accepts, the drift margin leaves at least half the TTL, the local
// deadline lies after the request's start and no later than start + TTL,
// and the keep-alive interval is positive.
func FuzzLeaseArithmetic(f *testing.F) {
	for _, ttl := range []int64{int64(MinTTL), int64(MinTTL) - 1, int64(time.Second), 1<<63 - 1, 1<<63 - 2, int64(time.Hour) * 24 * 365 * 290} {
		f.Add(ttl)
	}
	start := time.Now()
	l := NewLocker(newStub())
	defer l.Close()
	f.Fuzz(func(t *testing.T, n int64) {
		ttl := time.Duration(n)
		if l.validateTTL(ttl) != nil {
			if ttl >= MinTTL {
				t.Fatalf("TTL %v refused by a backend with no maximum", ttl)
			}
			return
		}
		d := drift(ttl)
		if d <= 0 || d > ttl/2 {
			t.Fatalf("TTL %v: drift %v is not in (0, TTL/2]", ttl, d)
		}
		dl := start.Add(ttl - d)
		if !dl.After(start) || dl.Sub(start) > ttl {
			t.Fatalf("TTL %v: deadline %v after start is outside (0, TTL]", ttl, dl.Sub(start))
		}
		if ttl/3 <= 0 {
			t.Fatalf("TTL %v: keep-alive interval %v", ttl, ttl/3)
		}
	})
}

// lostLease is a stubLease whose driver has reported it gone (Lost is
// closed) and whose Refresh waits for its context, as a refresh on a
// broken connection does.
type lostLease struct{ *stubLease }

func (l lostLease) Lost() <-chan struct{} { return closedChan }
func (l lostLease) Refresh(ctx context.Context, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

type lostDriver struct{ *stubDriver }

func (d lostDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	dl, err := d.stubDriver.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return lostLease{dl.(*stubLease)}, nil
}

// A Refresh that the driver's loss signal cut short says the lease is not
// held (ErrNotHeld), not that a context was cancelled: the caller's was
// not.
func TestRefreshCutByLossIsNotHeld(t *testing.T) {
	l := NewLocker(lostDriver{newStub()})
	defer l.Close()
	ctx := context.Background()
	ls, err := l.TryAcquire(ctx, "a", &AcquireOptions{NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	err = ls.Refresh(ctx)
	if !errors.Is(err, ErrNotHeld) || errors.Is(err, context.Canceled) {
		t.Fatalf("Refresh of a lease its driver reported lost returned %v; want ErrNotHeld", err)
	}
}
