package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Lease is a held lock. Its Done channel closes when the lease ends:
// released, lost (expired, revoked, session or connection broken) or its
// Locker closed; Err then says which. A Lease from a reentrant Acquire
// shares Done, Err and Token with the outer one; each must be released.
type Lease struct {
	h        *hold
	released atomic.Bool
}

// hold is one grant from the driver, shared by the Leases of a reentrant
// owner. The Locker's keeper refreshes it and ends it at its deadline.
type hold struct {
	l         *Locker
	name      string
	ttl       time.Duration
	keepAlive bool
	// unscheduled: ended, never put in the keeper's heap again (guarded
	// by the keeper's mu; here, with permits, to fill keepAlive's word).
	unscheduled bool
	permits     int32 // Event.Permits (observe.go)
	dl          driver.Lease
	token       uint64
	slot        *ownerSlot
	key         ownerKey
	gate        gatePass      // the gate's entry of name until ungate (then guarded by mu)
	id          uint64        // Event.ID (observe.go)
	granted     time.Duration // when granted, as time since l.born, if observed

	mu        sync.Mutex
	deadline  time.Time // zero for session-bound backends
	count     int       // reentrant hold count
	err       error     // non-nil once done is closed
	releasing bool
	// refreshing: a keep-alive refresh is in flight (beside releasing, so
	// that both bools share a word).
	refreshing bool

	// Keep-alive state, guarded by mu.
	nextRefresh   time.Time          // when the next keep-alive refresh is due
	cancelRefresh context.CancelFunc // cancels it; called by end

	// endCtx is cancelled by end with the lease's error as its cause; made
	// by the first Lease.Context (guarded by mu).
	endCtx    context.Context
	endCancel context.CancelCauseFunc

	dlReleased atomic.Bool // the driver's Release was called

	done chan struct{} // made by the first Done (guarded by mu); closed by end

	// The keeper's heap entry, guarded by the keeper's mu.
	at    time.Time // next event: a refresh or the deadline
	index int       // position in the heap; -1 when not in it
}

// Name returns the lock name.
func (ls *Lease) Name() string { return ls.h.name }

// Token returns the fencing token: it is greater than the token of every
// earlier holder of this name (on backends whose Capabilities say
// Fencing). Pass it to the resource you protect and have the resource
// reject writes with a token lower than one it has seen.
func (ls *Lease) Token() uint64 { return ls.h.token }

// TTL returns the lease length asked for.
func (ls *Lease) TTL() time.Duration { return ls.h.ttl }

// Done returns a channel that is closed when the lease ends. On TTL-bound
// backends it closes at the local deadline (the start of the last
// successful acquire or refresh request plus the TTL minus a drift margin),
// which is before the server can expire the lease. A call made after the
// deadline has passed returns a closed channel, even when the process was
// paused (a GC pause, a stopped process) and its timers have not run yet.
func (ls *Lease) Done() <-chan struct{} {
	ls.h.check()
	return ls.h.doneChan()
}

// Err returns nil while the lease is held, then an error wrapping
// ErrReleased, ErrLockLost (with the reason) or ErrClosed:
// `dlock: lease "orders/42": lock lost: lease expired (...)`. It reads the
// monotonic clock at the moment of the call: after the local deadline it
// never returns nil, even in the first instant after a pause longer than
// the TTL.
func (ls *Lease) Err() error { return ls.h.leaseErr(ls.h.check()) }

// leaseError is a lease's end as Err reports it: the hold's reason with the
// package prefix and the lock name, said once.
type leaseError struct {
	name string
	err  error
}

func (e *leaseError) Error() string { return fmt.Sprintf("dlock: lease %q: %v", e.name, e.err) }
func (e *leaseError) Unwrap() error { return e.err }

// leaseErr wraps the hold's reason err (nil while held) for callers.
func (h *hold) leaseErr(err error) error {
	if err == nil {
		return nil
	}
	return &leaseError{name: h.name, err: err}
}

// Deadline returns the local time until which the lease is known to be
// held, and false for session-bound backends, which have none. A deadline
// in the past means the lease has ended (Err says so).
func (ls *Lease) Deadline() (time.Time, bool) {
	ls.h.check()
	ls.h.mu.Lock()
	defer ls.h.mu.Unlock()
	return ls.h.deadline, !ls.h.deadline.IsZero()
}

// Context returns a context derived from parent that is cancelled when the
// lease ends (context.Cause is then the lease's Err) or parent ends. Call
// cancel when done with it. Like Err, its Err and Done methods read the
// clock when called: after the lease's deadline they report it cancelled at
// once. (Contexts derived from it are cancelled a moment later, by
// context.AfterFunc's goroutine.)
func (ls *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	end := ls.h.endContext()
	stop := context.AfterFunc(end, func() { cancel(context.Cause(end)) })
	return &leaseContext{Context: ctx, h: ls.h, cancel: cancel}, func() {
		stop()
		cancel(context.Canceled)
	}
}

// endContext returns a context that end cancels with the lease's error as
// its cause. It is made on first use: a lease nobody asks a Context of
// costs nothing for it.
func (h *hold) endContext() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.endCtx == nil {
		h.endCtx, h.endCancel = context.WithCancelCause(context.Background())
		if h.err != nil {
			h.endCancel(h.leaseErr(h.err))
		}
	}
	return h.endCtx
}

// leaseContext is a lease's Context: Err and Done check the lease's
// deadline against the clock before they answer.
type leaseContext struct {
	context.Context
	h      *hold
	cancel context.CancelCauseFunc
}

func (c *leaseContext) Done() <-chan struct{} {
	c.sync()
	return c.Context.Done()
}

func (c *leaseContext) Err() error {
	c.sync()
	return c.Context.Err()
}

func (c *leaseContext) sync() {
	if err := c.h.check(); err != nil {
		c.cancel(c.h.leaseErr(err))
	}
}

// Refresh extends the lease by its TTL from now. It returns an error
// wrapping ErrNotHeld when the lease has already ended or the server no
// longer holds it for this owner; it never re-creates a lock.
func (ls *Lease) Refresh(ctx context.Context) error {
	h := ls.h
	if ls.released.Load() {
		return fmt.Errorf("dlock: refresh %q: %w (released)", h.name, ErrNotHeld)
	}
	if err := h.check(); err != nil {
		return fmt.Errorf("dlock: refresh %q: %w (%w)", h.name, ErrNotHeld, err)
	}
	if err := h.refresh(ctx); err != nil {
		return wrap("refresh", h.name, ctx, err)
	}
	return nil
}

// Release frees the lock (for a reentrant owner: decrements the hold
// count, freeing the lock at the last Release). It works even when ctx was
// already cancelled: the release then uses a fresh context. It returns
// within ReleaseTimeout (or ctx's earlier deadline), even when the server
// does not answer. It returns an error wrapping ErrNotHeld when the lease
// had already ended or was released before; it never frees another owner's
// lock.
func (ls *Lease) Release(ctx context.Context) error {
	h := ls.h
	if !ls.released.CompareAndSwap(false, true) {
		return fmt.Errorf("dlock: release %q: %w (released twice)", h.name, ErrNotHeld)
	}
	ctx, cancel := releaseContext(ctx)
	defer cancel()
	// Only a reentrant owner's hold (slot set before its first Lease was
	// returned, never changed after) can be joined by another Acquire:
	// l.mu orders this release with it. Any other hold skips the
	// Locker-wide lock.
	reentrant := h.slot != nil
	if reentrant {
		h.l.mu.Lock()
	}
	h.mu.Lock()
	h.count--
	if h.count > 0 {
		lost := h.err
		h.mu.Unlock()
		h.l.mu.Unlock() // count > 1: a reentrant hold
		if lost != nil {
			return fmt.Errorf("dlock: release %q: %w (%w)", h.name, ErrNotHeld, lost)
		}
		return nil
	}
	prior := h.err
	if prior == nil && h.expired(time.Now()) {
		prior = h.expiredErr()
	}
	h.releasing = true
	if reentrant && h.slot.hold == h {
		h.slot.hold = nil // a new Acquire by this owner starts a new hold
	}
	h.mu.Unlock()
	if reentrant {
		h.l.mu.Unlock()
	}

	if prior != nil {
		// Already lost: still ask the server to free it, in case it has not
		// expired there yet. The owner check keeps a new holder safe.
		h.end(prior)
		_ = h.releaseDriver(ctx)
		h.ungate()
		return fmt.Errorf("dlock: release %q: %w (%w)", h.name, ErrNotHeld, prior)
	}
	h.end(ErrReleased)
	err := h.releaseDriver(ctx)
	// Only now may a sibling waiting locally go to the server: earlier,
	// its try would find the lock still held.
	h.ungate()
	if h.l.obs != nil {
		h.observe(EventReleased, h.held(), err)
	}
	if err != nil {
		if errors.Is(err, ErrNotHeld) {
			h.setErr(fmt.Errorf("%w: the server no longer held it at release", ErrLockLost))
		}
		return wrap("release", h.name, nil, err)
	}
	return nil
}

// releaseDriver calls the driver's Release at most once per grant.
func (h *hold) releaseDriver(ctx context.Context) error {
	if !h.dlReleased.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: already released", ErrNotHeld)
	}
	return h.dl.Release(ctx)
}

// closedChan is the Done channel of a hold that ended before anyone asked
// for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// doneChan returns the channel end closes, making it on first use: a lease
// whose Done nobody asks for costs no channel.
func (h *hold) doneChan() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return h.done
}

func (h *hold) currentErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// check returns the hold's error, first ending the hold when its local
// deadline has passed. Everything that tells a caller whether the lease is
// held goes through it, so that the answer is read from the clock at the
// moment of the call: a holder paused past its TTL (Kleppmann's scenario)
// is told the lease is lost in the first instant after it resumes, before
// the Locker's keep-alive timer has had a chance to fire.
func (h *hold) check() error {
	h.mu.Lock()
	err := h.err
	expired := err == nil && h.expired(time.Now())
	h.mu.Unlock()
	if !expired {
		return err
	}
	h.end(h.expiredErr())
	return h.currentErr()
}

// expired reports whether now is at or past the hold's deadline (never for
// a session-bound hold). h.mu must be held.
func (h *hold) expired(now time.Time) bool {
	return !h.deadline.IsZero() && !now.Before(h.deadline)
}

func (h *hold) expiredErr() error {
	return fmt.Errorf("%w: lease expired (not refreshed within its TTL of %v)", ErrLockLost, h.ttl)
}

func (h *hold) setErr(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
}

// end closes done with err, once, and stops the keep-alive (cancelling a
// refresh in flight). It reports whether this call ended the hold.
func (h *hold) end(err error) bool {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return false
	}
	h.err = err
	if h.done == nil {
		h.done = closedChan
	} else {
		close(h.done)
	}
	cancelRefresh, endCancel := h.cancelRefresh, h.endCancel
	h.cancelRefresh = nil
	releasing := h.releasing // Release ungates once the server has freed it
	h.mu.Unlock()
	if cancelRefresh != nil {
		cancelRefresh()
	}
	if endCancel != nil {
		endCancel(h.leaseErr(err))
	}
	h.l.forget(h)
	if !releasing {
		h.ungate()
	}
	if h.l.obs != nil && err != ErrReleased {
		h.observeEnd(err)
	}
	return true
}

// lost ends the hold on the driver's loss signal.
func (h *hold) lost() {
	h.end(fmt.Errorf("%w: the backend reported the lease gone", ErrLockLost))
}

// watchLoss arranges for the driver's loss signal to end the hold: by a
// callback when the driver's lease offers one (driver.LossNotifier), else
// by a goroutine waiting on its Lost channel; a lease whose Lost is nil
// (the driver cannot tell: Redis, SQL version leases) costs nothing. l.mu
// is held and l is not closed.
func (h *hold) watchLoss() {
	if n, ok := h.dl.(driver.LossNotifier); ok {
		n.OnLost(h.lost)
		return
	}
	lost := h.dl.Lost()
	if lost == nil {
		return
	}
	h.l.wg.Add(1)
	go func() {
		defer h.l.wg.Done()
		select {
		case <-lost:
			h.lost()
		case <-h.doneChan():
		}
	}()
}

// nextEvent is when the keeper must next look at h: the earlier of its next
// keep-alive refresh (none while one is in flight or it is being released)
// and its deadline; zero for none. h.mu must be held.
func (h *hold) nextEvent() time.Time {
	next := h.deadline
	if h.keepAlive && !h.refreshing && !h.releasing && (next.IsZero() || h.nextRefresh.Before(next)) {
		next = h.nextRefresh
	}
	return next
}

// refresh is Lease.Refresh's call: bounded by the deadline, and cut short
// by the driver's loss signal.
func (h *hold) refresh(ctx context.Context) error {
	h.mu.Lock()
	dl := h.deadline
	h.mu.Unlock()
	if !dl.IsZero() {
		// A refresh that returns after the deadline is useless: the lease
		// is reported lost then anyway.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	lost := h.dl.Lost()
	if lost == nil {
		return h.refreshWith(ctx)
	}
	// A refresh blocked on a broken connection must not keep the hold
	// from seeing the driver's loss signal.
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h.refreshWith(ctx)
	if err != nil && outer.Err() == nil && isContextErr(err) {
		select {
		case <-lost:
			// Cut short by the loss signal (which may have come before
			// the refresh began): the lease is gone, not the caller's
			// context.
			h.lost()
			return fmt.Errorf("%w: the backend reported the lease gone", ErrNotHeld)
		default:
		}
	}
	return err
}

// refreshWith calls the driver's Refresh and, on success, moves the
// deadline to the start of the request plus the TTL minus the drift margin.
func (h *hold) refreshWith(ctx context.Context) error {
	start := time.Now()
	err := h.dl.Refresh(ctx, h.ttl)
	if h.l.obs != nil {
		h.observe(EventRefresh, time.Since(start), err)
	}
	if err != nil {
		if errors.Is(err, ErrNotHeld) {
			h.end(fmt.Errorf("%w: refresh found it no longer held", ErrLockLost))
		}
		return err
	}
	h.mu.Lock()
	// A refresh never revives a hold whose deadline passed while it was in
	// flight (or before it started, in a pause): the lease may have expired
	// on the server and been granted to another owner in between.
	if h.err == nil && !h.deadline.IsZero() && !h.expired(time.Now()) {
		if nd := start.Add(h.ttl - drift(h.ttl)); nd.After(h.deadline) {
			h.deadline = nd
		}
	}
	h.mu.Unlock()
	if err := h.check(); err != nil {
		return fmt.Errorf("%w (%w)", ErrNotHeld, err)
	}
	return nil
}
