package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Options configure a Locker as it is opened (OpenWith, NewLockerWith and
// the drivers' OpenLocker constructors). A nil *Options, and every zero
// field, means the default.
type Options struct {
	// Observer, when set, sees every step of the lives of the Locker's
	// leases (see Event). Nil: nothing is observed, at no cost.
	Observer Observer
}

func (o *Options) observer() Observer {
	if o == nil {
		return nil
	}
	return o.Observer
}

// Observer sees every step of the lives of a Locker's locks and permits:
// attempts, waits, grants, refreshes, losses, releases, the Locker's close,
// and the lines its client library logs. Observe is called synchronously,
// on the goroutine that took the step (an Acquire's caller, the keep-alive,
// Release's caller), possibly from many goroutines at once: it must be safe
// for concurrent use, quick, and must not call the Locker.
//
// A lease's Done channel closes before its EventLost is observed: the
// holder hears of the loss first.
//
// ctx is the caller's context for the steps of an acquisition (an adapter
// may take its trace from it) and context.Background() for the others.
// Events carry the lock's name and errors, never a URL or a password.
//
// An Event is passed by value and holds no pointer the Locker made for it:
// an Observer that looks at it and returns costs no allocation (NewSlogObserver at
// a disabled level costs none either).
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// EventKind says which step of a lease's life an Event reports.
type EventKind uint8

const (
	// EventAttempt: an Acquire or TryAcquire has started (its arguments
	// were valid and the Locker open). Every attempt ends with exactly one
	// EventGranted or EventNotAcquired of the same ID.
	EventAttempt EventKind = iota + 1
	// EventWait: the first try found the lock taken and the Acquire now
	// waits for the backend's wake-up or polls. On a backend that queues
	// waiters itself (Capabilities.Wait is WaitQueue: the wait is one call
	// of the driver) there is no EventWait or EventWake: the wait shows in
	// EventGranted's Elapsed.
	EventWait
	// EventWake: a waiting Acquire was woken (Woken: by the backend's
	// release signal; else by its backoff timer) and tries again.
	EventWake
	// EventGranted: the lock or permit is held. Token is its fencing token,
	// Elapsed the time since EventAttempt (the wait). Reentrant is true
	// when an Owner's nested Acquire joined its live lease: no new lease
	// began, and only the outer lease's release ends it.
	EventGranted
	// EventNotAcquired: the attempt ended without the lock. Err says why:
	// ErrNotAcquired (taken: TryAcquire), a context error, ErrClosed, or
	// the backend's error. Elapsed is the time since EventAttempt.
	EventNotAcquired
	// EventRefresh: a refresh returned (the keep-alive's or Lease.Refresh).
	// Elapsed is its latency; Err is nil on success.
	EventRefresh
	// EventLost: the lease ended without a Release: Err wraps ErrLockLost
	// with the reason (expired locally, the backend's loss signal, a
	// refresh that found it gone). Elapsed is how long it was held; Margin
	// how long before the local deadline the loss was seen (zero for a
	// session-bound lease, which has no deadline; zero or below when the
	// deadline itself ended it).
	EventLost
	// EventReleased: the lease ended by Release, or by Close (Err wraps
	// ErrClosed then). Elapsed is how long it was held. Err is nil when
	// the backend freed it, else the release's error (wrapping ErrNotHeld
	// when the backend no longer held it). Every lease ends with exactly
	// one EventLost or EventReleased: the Release of a lease already lost
	// reports nothing more.
	EventReleased
	// EventClosed: the Locker was closed (Err: the driver's Close error).
	EventClosed
	// EventClientLog: the backend's client library logged Message (a
	// broken connection, a failed dial), scrubbed of the URL's secrets.
	// Only drivers opened from a URL route it here; by default such lines
	// are dropped, never written to stderr.
	EventClientLog
)

var kindNames = [...]string{
	EventAttempt:     "attempt",
	EventWait:        "wait",
	EventWake:        "wake",
	EventGranted:     "granted",
	EventNotAcquired: "not-acquired",
	EventRefresh:     "refresh",
	EventLost:        "lost",
	EventReleased:    "released",
	EventClosed:      "closed",
	EventClientLog:   "client-log",
}

// String returns the kind's name: "attempt", "wait", "wake", "granted",
// "not-acquired", "refresh", "lost", "released", "closed", "client-log".
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one step of a lease's life, passed to an Observer by value.
type Event struct {
	Kind EventKind
	// ID ties the steps of one acquisition and of the lease it granted
	// together (unique in the process, across Lockers; zero for
	// EventClosed and EventClientLog).
	ID uint64
	// Name is the lock's or semaphore's name.
	Name string
	// Permits is 0 for a lock and N for a permit of a semaphore of N.
	Permits int
	// Backend and Strategy are the Locker's Capabilities.Backend and
	// Capabilities.Strategy ("redis", "set-nx"; "postgres", "advisory").
	Backend, Strategy string
	// Wait is true for a blocking Acquire, false for TryAcquire
	// (acquisition events only).
	Wait bool
	// Woken: EventWake came from the backend's release signal.
	Woken bool
	// Reentrant: EventGranted joined an Owner's live lease.
	Reentrant bool
	// Token is the lease's fencing token (from EventGranted on).
	Token uint64
	// Elapsed: the wait (EventGranted, EventNotAcquired, EventWake: since
	// EventAttempt), the latency (EventRefresh) or the hold time
	// (EventLost, EventReleased).
	Elapsed time.Duration
	// Margin (EventLost) is the time left to the local deadline when the
	// loss was seen.
	Margin time.Duration
	// Err is the error of the step, if any (see each kind).
	Err error
	// Message is the client library's line (EventClientLog).
	Message string
}

// Outcome is a short, bounded word for the event's result, for metrics
// and logs: "ok", "not-acquired", "canceled", "closed", "lost", "error".
func (e Event) Outcome() string {
	switch err := e.Err; {
	case err == nil:
		if e.Kind == EventLost {
			return "lost"
		}
		return "ok"
	case errors.Is(err, ErrNotAcquired):
		return "not-acquired"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, ErrLockLost), errors.Is(err, ErrNotHeld):
		return "lost"
	}
	return "error"
}

// OpenWith is Open with options: opts.Observer sees the Locker's events
// from the start, and the lines the client library of a driver that
// implements driver.ClientLogger logs (without an Observer they are
// dropped, never written to stderr).
func OpenWith(ctx context.Context, rawURL string, opts *Options) (*Locker, error) {
	drv, err := openDriver(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	return NewLockerWith(drv, opts), nil
}

// NewLockerWith is NewLocker with options. Driver packages call it from
// their OpenLocker constructors.
func NewLockerWith(drv driver.Locker, opts *Options) *Locker {
	l := NewLocker(drv)
	l.obs = opts.observer()
	if l.obs != nil {
		if c, ok := drv.(driver.ClientLogger); ok {
			obs, backend, strategy := l.obs, l.caps.Backend, l.caps.Strategy
			c.SetClientLog(func(line string) {
				obs.Observe(context.Background(), Event{Kind: EventClientLog, Backend: backend, Strategy: strategy, Message: line})
			})
		}
	}
	return l
}

// event returns an Event of l about name, with the Locker's backend.
func (l *Locker) event(kind EventKind, id uint64, name string, permits int) Event {
	return Event{Kind: kind, ID: id, Name: name, Permits: permits, Backend: l.caps.Backend, Strategy: l.caps.Strategy}
}

// eventIDs numbers acquisitions across the process, so that an Observer
// shared by several Lockers can tell their events apart by ID.
var eventIDs atomic.Uint64

// trace identifies an acquisition to the Observer: its Event.ID and when
// it started (the zero trace when nothing is observed).
type trace struct {
	id    uint64
	start time.Time
}

// acquireObserved is acquireChecked between EventAttempt and its
// EventGranted or EventNotAcquired. l.obs is not nil.
func (l *Locker) acquireObserved(ctx context.Context, op, name string, permits int, opts *AcquireOptions, wait bool) (*Lease, error) {
	t := trace{id: eventIDs.Add(1), start: time.Now()}
	e := l.event(EventAttempt, t.id, name, permits)
	e.Wait = wait
	l.obs.Observe(ctx, e)
	ls, err := l.acquireChecked(ctx, op, name, permits, opts, wait, t)
	e.Elapsed = time.Since(t.start)
	if err != nil {
		e.Kind, e.Err = EventNotAcquired, err
	} else {
		e.Kind, e.Token, e.Reentrant = EventGranted, ls.h.token, ls.h.id != t.id
	}
	l.obs.Observe(ctx, e)
	return ls, err
}

// observeWait reports the wait (EventWait) or a wake-up (EventWake) of the
// acquisition t. l.obs is not nil.
func (l *Locker) observeWait(ctx context.Context, kind EventKind, req driver.Request, t trace, woken bool) {
	e := l.event(kind, t.id, req.Name, req.Permits)
	e.Wait, e.Woken = true, woken
	if !t.start.IsZero() {
		e.Elapsed = time.Since(t.start)
	}
	l.obs.Observe(ctx, e)
}

// observe reports a step of h's lease. l.obs is not nil.
func (h *hold) observe(kind EventKind, elapsed time.Duration, err error) {
	e := h.l.event(kind, h.id, h.name, int(h.permits))
	e.Token, e.Elapsed, e.Err = h.token, elapsed, err
	h.l.obs.Observe(context.Background(), e)
}

// held is how long h has been held (if observed).
func (h *hold) held() time.Duration { return time.Since(h.l.born) - h.granted }

// observeEnd reports the end of h with err (not by Release: Release
// reports its own). l.obs is not nil.
func (h *hold) observeEnd(err error) {
	now := time.Now()
	e := h.l.event(EventLost, h.id, h.name, int(h.permits))
	e.Token, e.Elapsed, e.Err = h.token, h.held(), err
	if errors.Is(err, ErrClosed) {
		e.Kind = EventReleased
	} else {
		h.mu.Lock()
		if !h.deadline.IsZero() {
			e.Margin = h.deadline.Sub(now)
		}
		h.mu.Unlock()
	}
	h.l.obs.Observe(context.Background(), e)
}
