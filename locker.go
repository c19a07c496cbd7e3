package dlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Capabilities says what a backend guarantees; see driver.Capabilities.
type Capabilities = driver.Capabilities

// Info is what a backend can say about a lock without taking it.
type Info = driver.Info

// Locker acquires locks on one backend. It is safe for concurrent use by
// many goroutines; each Locker stands for one client of the backend (one
// connection pool, one session). Open one per process and share it.
//
// The Locker does, once for every backend: argument checks, waiting (the
// backend's native queue or wake-up when it has one, capped exponential
// backoff with jitter otherwise), keep-alive, the local lease deadline,
// reentrancy, closing and error wrapping.
//
// Goroutines of one Locker never compete with each other on the server:
// at most one attempt of a Locker on a name is there at a time (see
// gate.go). A blocking Acquire of a name that a sibling holds or waits for
// queues in the Locker, first come first served; a TryAcquire of a name a
// sibling holds fails without a server call.
type Locker struct {
	drv       driver.Locker
	caps      driver.Capabilities
	blocker   driver.Blocker
	watcher   driver.Watcher
	inspector driver.Inspector
	obs       Observer  // nil: nothing observed (observe.go)
	born      time.Time // the clock of hold.granted

	mu     sync.Mutex
	closed bool
	holds  map[*hold]struct{}
	owners map[ownerKey]*ownerSlot
	wg     sync.WaitGroup // the keeper's ticks and refreshes, loss watchers

	// isClosed reads closed without mu: Close stores it, under mu, before
	// it ends the waits. The acquire path's early checks read it; the
	// decisions that must agree with Close's list of holds read closed
	// under mu.
	closedFlag atomic.Bool

	// The blocked acquisitions, ended by Close, under a mutex of their own:
	// every Acquire registers and removes its wait, and mu is the Locker's
	// one lock on every grant and release.
	waitMu sync.Mutex
	waits  map[uint64]context.CancelFunc
	waitID uint64

	keeper keeper // refreshes every hold, ends it at its deadline
	gates  gates  // admits this Locker's attempts on a name one at a time

	closing chan struct{} // closed by Close: ends local waits of the gate

	// The backoff bounds of a wait with a Watcher (watchFallback,
	// watchMax); tests lengthen them to tell a wake-up from the timer.
	watchLo, watchHi time.Duration
}

type ownerKey struct{ name, owner string }

// ownerSlot serialises acquisitions by one owner of one name, so that two
// goroutines of the same owner join one hold instead of racing.
type ownerSlot struct {
	sem  chan struct{} // capacity 1: held while acquiring
	hold *hold         // the live hold, or nil
	refs int           // goroutines using the slot
}

// NewLocker returns a Locker over a driver. Driver packages call it from
// their OpenLocker constructors; applications usually call Open.
func NewLocker(drv driver.Locker) *Locker {
	l := &Locker{
		drv:    drv,
		caps:   drv.Capabilities(),
		holds:  make(map[*hold]struct{}),
		owners: make(map[ownerKey]*ownerSlot),
		waits:  make(map[uint64]context.CancelFunc),
	}
	l.caps.Reentrant = true
	l.born = time.Now()
	l.watchLo, l.watchHi = watchFallback, watchMax
	l.keeper.init(l)
	l.gates.init()
	l.closing = make(chan struct{})
	l.blocker, _ = drv.(driver.Blocker)
	l.watcher, _ = drv.(driver.Watcher)
	l.inspector, _ = drv.(driver.Inspector)
	return l
}

// Driver returns the driver underneath, for its As-style extensions.
func (l *Locker) Driver() driver.Locker { return l.drv }

// Capabilities reports what the backend guarantees.
func (l *Locker) Capabilities() Capabilities { return l.caps }

// Acquire blocks until it holds the lock name, or ctx ends. When ctx ends
// it returns ctx.Err() unwrapped and leaves nothing behind on the server.
func (l *Locker) Acquire(ctx context.Context, name string, opts *AcquireOptions) (*Lease, error) {
	return l.acquire(ctx, name, 0, opts, true)
}

// TryAcquire makes one attempt to take the lock name. It returns an error
// wrapping ErrNotAcquired at once when another owner holds it.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts *AcquireOptions) (*Lease, error) {
	return l.acquire(ctx, name, 0, opts, false)
}

// Inspect reports what the backend knows about the lock name without
// taking it; ErrUnsupported when the backend cannot tell.
func (l *Locker) Inspect(ctx context.Context, name string) (Info, error) {
	if err := l.validateName(name); err != nil {
		return Info{}, fmt.Errorf("dlock: inspect: %w", err)
	}
	if l.isClosed() {
		return Info{}, fmt.Errorf("dlock: inspect %q: %w", name, ErrClosed)
	}
	if l.inspector == nil {
		return Info{}, fmt.Errorf("dlock: inspect %q: %w (%s)", name, ErrUnsupported, l.caps.Backend)
	}
	info, err := l.inspector.Inspect(ctx, name)
	if err != nil {
		return Info{}, wrap("inspect", name, ctx, err)
	}
	return info, nil
}

func (l *Locker) isClosed() bool { return l.closedFlag.Load() }

// acquire takes the lock name (permits 0) or one of the permits of the
// semaphore name (permits > 0, already checked by Locker.Semaphore).
func (l *Locker) acquire(ctx context.Context, name string, permits int, opts *AcquireOptions, wait bool) (*Lease, error) {
	op := "acquire"
	if !wait {
		op = "try-acquire"
	}
	if permits > 0 {
		op += " semaphore"
	}
	if err := l.validateName(name); err != nil {
		return nil, fmt.Errorf("dlock: %s: %w", op, err)
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("dlock: %s %q: %w", op, name, err)
	}
	if permits > 0 && opts.owner() != "" {
		return nil, fmt.Errorf("dlock: %s %q: %w: a semaphore is not reentrant (Owner must be empty; each Acquire takes one more permit)", op, name, ErrInvalidOption)
	}
	if err := l.validateTTL(opts.ttl()); err != nil {
		return nil, fmt.Errorf("dlock: %s %q: %w", op, name, err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("dlock: %s %q: %w", op, name, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l.obs == nil {
		return l.acquireChecked(ctx, op, name, permits, opts, wait, trace{})
	}
	return l.acquireObserved(ctx, op, name, permits, opts, wait)
}

// acquireChecked is acquire's work once its arguments are checked; t
// identifies the acquisition to the Observer.
func (l *Locker) acquireChecked(ctx context.Context, op, name string, permits int, opts *AcquireOptions, wait bool, t trace) (*Lease, error) {
	if permits > 0 {
		// No gate: a Locker may hold several permits of one semaphore,
		// and its attempts on it do not split anything between them.
		return l.grantAdmitted(ctx, op, name, permits, opts, wait, gatePass{}, t)
	}
	owner := opts.owner()
	if owner == "" {
		return l.grant(ctx, op, name, opts, wait, t)
	}

	// Reentrant path: one slot per (name, owner) on this Locker.
	key := ownerKey{name, owner}
	l.mu.Lock()
	slot := l.owners[key]
	if slot == nil {
		slot = &ownerSlot{sem: make(chan struct{}, 1)}
		l.owners[key] = slot
	}
	slot.refs++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		slot.refs--
		if slot.refs == 0 && slot.hold == nil {
			delete(l.owners, key)
		}
		l.mu.Unlock()
	}()
	if wait {
		select {
		case slot.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	} else {
		// One attempt never waits behind this owner's own blocked Acquire.
		select {
		case slot.sem <- struct{}{}:
		default:
			return nil, fmt.Errorf("dlock: %s %q: %w (this owner's own Acquire is waiting for it)", op, name, ErrNotAcquired)
		}
	}
	defer func() { <-slot.sem }()

	l.mu.Lock()
	if h := slot.hold; h != nil {
		h.mu.Lock()
		// A hold past its deadline is not joined, even if its timer has
		// not ended it yet (the caller may have been paused).
		live := h.err == nil && !h.expired(time.Now())
		if live {
			h.count++
		}
		h.mu.Unlock()
		if live {
			l.mu.Unlock()
			return &Lease{h: h}, nil
		}
		slot.hold = nil
	}
	l.mu.Unlock()

	ls, err := l.grant(ctx, op, name, opts, wait, t)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	slot.hold = ls.h
	ls.h.slot, ls.h.key = slot, key
	l.mu.Unlock()
	return ls, nil
}

// grant obtains a driver lease, starts its hold and returns its first
// Lease. Close ends a grant in flight with ErrClosed. The gate admits one
// attempt of this Locker on name to the server at a time.
func (l *Locker) grant(ctx context.Context, op, name string, opts *AcquireOptions, wait bool, t trace) (*Lease, error) {
	p, err := l.admit(ctx, op, name, wait)
	if err != nil {
		return nil, err
	}
	return l.grantAdmitted(ctx, op, name, 0, opts, wait, p, t)
}

// grantAdmitted is grant's work once admitted by the gate with p. It ends
// p exactly once: with the hold it made (which takes p over), or with nil
// when the driver granted nothing. A semaphore's attempts (permits > 0)
// come with the zero pass: they are not gated.
func (l *Locker) grantAdmitted(ctx context.Context, op, name string, permits int, opts *AcquireOptions, wait bool, p gatePass, t trace) (*Lease, error) {
	ttl := opts.ttl()
	req := driver.Request{Name: name, TTL: ttl, Owner: opts.owner(), Permits: permits}
	blocker := l.blocker
	if permits > 0 && l.caps.SemaphoreWait != driver.WaitQueue {
		blocker = nil
	}
	var (
		dl    driver.Lease
		start time.Time
		err   error
	)
	switch {
	case !wait:
		start = time.Now()
		dl, err = l.drv.TryAcquire(ctx, req)
	case blocker != nil:
		dl, start, err = l.block(ctx, req)
	default:
		// One attempt first, as TryAcquire: a free lock costs no wait
		// set-up (no context, no Watch: a pub/sub subscription on Redis).
		start = time.Now()
		dl, err = l.drv.TryAcquire(ctx, req)
		if errors.Is(err, driver.ErrNotAcquired) {
			p.setTrying(false)
			dl, start, err = l.waitLoop(ctx, req, err, p, t)
		}
	}
	if err != nil {
		p.finish(nil, l.blocker != nil)
		if wait && ctx.Err() == nil && l.isClosed() {
			return nil, fmt.Errorf("dlock: %s %q: %w", op, name, ErrClosed)
		}
		if permits > 0 && errors.Is(err, driver.ErrNotAcquired) && !isContextErr(err) {
			// "lock is held by another owner" would mislead here.
			err = permitsHeld(permits)
		}
		return nil, wrap(op, name, ctx, err)
	}
	if g, ok := dl.(driver.Granted); ok {
		// A grant time earlier than the request (a server-side hand-off
		// to a queued waiter) only makes the deadline more conservative.
		if t := g.GrantedAt(); !t.IsZero() {
			start = t
		}
	}
	// The hold and its first Lease in one allocation.
	hl := &struct {
		h  hold
		ls Lease
	}{h: hold{
		l:         l,
		name:      name,
		ttl:       ttl,
		keepAlive: opts.keepAlive(),
		dl:        dl,
		token:     dl.Token(),
		count:     1,
		index:     -1,
		gate:      p,
		id:        t.id,
		permits:   int32(min(permits, math.MaxInt32)),
	}}
	h := &hl.h
	hl.ls.h = h
	if l.obs != nil {
		h.granted = time.Since(l.born)
	}
	if !l.caps.SessionBound {
		h.deadline = start.Add(ttl - drift(ttl))
	}
	if h.keepAlive {
		h.nextRefresh = time.Now().Add(ttl / 3)
	}
	// The gate hears of the hold before anything can end it.
	p.finish(h, l.blocker != nil)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		rctx, cancel := cleanupContext(ctx)
		defer cancel()
		_ = dl.Release(rctx)
		h.ungate()
		return nil, fmt.Errorf("dlock: %s %q: %w", op, name, ErrClosed)
	}
	l.holds[h] = struct{}{}
	l.keeper.start(h)
	h.watchLoss()
	l.mu.Unlock()
	return &hl.ls, nil
}

// block waits in the driver's native queue, under a context that Close
// also ends.
func (l *Locker) block(ctx context.Context, req driver.Request) (driver.Lease, time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer l.removeWait(l.addWait(cancel))
	start := time.Now()
	dl, err := l.blocker.Acquire(ctx, req)
	return dl, start, err
}

// addWait registers the cancel func of a blocked acquisition, for Close to
// call (at once when the Locker is closed already); removeWait(id) undoes
// it. (A map entry, where context.AfterFunc on a context that Close
// cancels would cost two allocations per wait.)
func (l *Locker) addWait(cancel context.CancelFunc) (id uint64) {
	l.waitMu.Lock()
	defer l.waitMu.Unlock()
	if l.isClosed() { // Close set it before it took waitMu to end the waits
		cancel()
		return 0
	}
	l.waitID++
	l.waits[l.waitID] = cancel
	return l.waitID
}

func (l *Locker) removeWait(id uint64) {
	l.waitMu.Lock()
	delete(l.waits, id)
	l.waitMu.Unlock()
}

// Backoff bounds for waiting without a native queue. With a Watcher the
// timer is only a fallback for a lost wake-up or a holder that expired
// without releasing, so it may be longer.
const (
	pollMin        = 2 * time.Millisecond
	pollMax        = 100 * time.Millisecond
	watchFallback  = 50 * time.Millisecond
	watchMax       = time.Second
	cleanupTimeout = ReleaseTimeout
)

// waitLoop waits for a lock whose first attempt failed with failed (an
// ErrNotAcquired), until granted or ctx or the Locker ends. With a
// Watcher it watches the name now, then tries again before it waits (a
// release between the failed attempt and the Watch would wake nobody),
// then waits for a wake-up, a backoff timer, or the end.
func (l *Locker) waitLoop(ctx context.Context, req driver.Request, failed error, p gatePass, t trace) (driver.Lease, time.Time, error) {
	if l.obs != nil {
		l.observeWait(ctx, EventWait, req, t, false)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer l.removeWait(l.addWait(cancel))
	var wake <-chan struct{}
	lo, hi := pollMin, pollMax
	err := failed
	var start time.Time
	if l.watcher != nil && (req.Permits == 0 || l.caps.SemaphoreWait == driver.WaitNotify) {
		w, stop, werr := l.watcher.Watch(ctx, req)
		if werr == nil {
			defer stop()
			wake = w
			lo, hi = l.watchLo, l.watchHi
			var dl driver.Lease
			var done bool
			if dl, start, done, err = l.attempt(ctx, req, p); done {
				return dl, start, err
			}
		} else if ctx.Err() != nil {
			return nil, time.Time{}, ctx.Err()
		}
		// A failed Watch degrades to polling.
	}
	step := lo
	var timer *time.Timer
	for {
		// Full jitter in [step/2, step), then double up to the cap.
		d := step/2 + rand.N(step/2+1)
		var na *driver.NotAcquiredError
		if errors.As(err, &na) && na.RetryAfter > 0 && na.RetryAfter < d {
			d = na.RetryAfter + time.Millisecond
		}
		step = min(step*2, hi)
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		woken := false
		select {
		case _, ok := <-wake:
			step = lo
			woken = ok
			if !ok { // a closed channel would wake us forever: poll instead
				wake, lo, hi = nil, pollMin, pollMax
			}
		case <-timer.C:
		case <-ctx.Done():
			return nil, start, ctx.Err()
		}
		timer.Stop()
		if l.obs != nil {
			l.observeWait(ctx, EventWake, req, t, woken)
		}
		var dl driver.Lease
		var done bool
		if dl, start, done, err = l.attempt(ctx, req, p); done {
			return dl, start, err
		}
	}
}

// attempt makes one try of a wait; done reports that the wait is over:
// granted (err nil), or failed otherwise than ErrNotAcquired. Siblings'
// TryAcquire calls wait for its outcome (p).
func (l *Locker) attempt(ctx context.Context, req driver.Request, p gatePass) (dl driver.Lease, start time.Time, done bool, err error) {
	p.setTrying(true)
	start = time.Now()
	dl, err = l.drv.TryAcquire(ctx, req)
	done = err == nil || !errors.Is(err, driver.ErrNotAcquired)
	if !done {
		p.setTrying(false)
	}
	return dl, start, done, err
}

// Close ends every lease of this Locker (their Done channels close with
// ErrClosed), releases them on the server, and closes the driver. Later
// calls return ErrClosed. Close is idempotent.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.closedFlag.Store(true)
	close(l.closing)
	holds := make([]*hold, 0, len(l.holds))
	for h := range l.holds {
		holds = append(holds, h)
	}
	l.mu.Unlock()
	// A wait registered from now on sees closedFlag and ends at once.
	l.waitMu.Lock()
	for _, cancel := range l.waits {
		cancel()
	}
	l.waitMu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, h := range holds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h.end(ErrClosed) {
				_ = h.releaseDriver(ctx)
			}
		}()
	}
	wg.Wait()
	l.keeper.close()
	l.wg.Wait()
	err := l.drv.Close()
	if l.obs != nil {
		e := l.event(EventClosed, 0, "", 0)
		e.Err = err
		l.obs.Observe(context.Background(), e)
	}
	if err != nil {
		return fmt.Errorf("dlock: close: %w", err)
	}
	return nil
}

func (l *Locker) forget(h *hold) {
	l.mu.Lock()
	delete(l.holds, h)
	if h.slot != nil && h.slot.hold == h {
		h.slot.hold = nil
		if h.slot.refs == 0 {
			delete(l.owners, h.key)
		}
	}
	l.mu.Unlock()
	l.keeper.remove(h)
}

// wrap adds the operation and name to a driver error, once. Context
// errors are returned unwrapped when ctx has ended.
func wrap(op, name string, ctx context.Context, err error) error {
	if ctx != nil && ctx.Err() != nil && isContextErr(err) && !errors.Is(err, driver.ErrPoolExhausted) {
		return ctx.Err()
	}
	return fmt.Errorf("dlock: %s %q: %w", op, name, err)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// cleanupContext returns a fresh bounded context for clean-up work that
// must happen even though ctx was cancelled (values of ctx are kept).
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// ReleaseTimeout bounds Lease.Release (and the release in Do and Close):
// a release given a context with no deadline, or one already ended, gives
// up after this long (a release given context.Background() after at least
// nine tenths of it: such releases share one bounded context), even when
// the server does not answer. The lease has
// ended locally by then either way; the server frees the lock at the TTL.
const ReleaseTimeout = 5 * time.Second

// releaseContext returns the context a release runs under: ctx while it is
// live, bounded by ReleaseTimeout; a fresh context bounded by
// ReleaseTimeout once ctx has ended (a release must happen even after the
// caller's context was cancelled: unlock after cancel is what users of
// lock libraries ask for most).
func releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Err() != nil {
		return cleanupContext(ctx)
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= ReleaseTimeout {
		return ctx, noCancel // bounded already: no context, no timer
	}
	if ctx == context.Background() || ctx == context.TODO() {
		return backgroundRelease(time.Now()), noCancel
	}
	return context.WithTimeout(ctx, ReleaseTimeout)
}

func noCancel() {}

// The releases given context.Background() (or TODO), the common `defer
// ls.Release(context.Background())`, share one bounded context, made
// anew once the current one is releaseReuse old: a release's bound is then
// between ReleaseTimeout - releaseReuse and ReleaseTimeout. A context of
// its own would cost each release a timer, and a timer made on a
// goroutine's first action after it slept (a holder releasing after its
// work) costs 2-4 µs on a real backend, 15 µs when no other timer of the
// process is due sooner: the runtime wakes its network poller to re-arm.
// Such a context carries no values and no cancellation of its caller, so
// sharing it changes nothing else.
type sharedRelease struct {
	ctx    context.Context
	cancel context.CancelFunc // never called: the context ends at its deadline
	made   time.Time
}

const releaseReuse = ReleaseTimeout / 10

var sharedReleaseCtx atomic.Pointer[sharedRelease]

// backgroundRelease returns the shared release context at now.
func backgroundRelease(now time.Time) context.Context {
	if s := sharedReleaseCtx.Load(); s != nil && now.Sub(s.made) < releaseReuse && !now.Before(s.made) {
		return s.ctx
	}
	s := &sharedRelease{made: now}
	s.ctx, s.cancel = context.WithDeadline(context.Background(), now.Add(ReleaseTimeout))
	sharedReleaseCtx.Store(s)
	return s.ctx
}
