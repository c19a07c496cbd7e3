package dlock

import (
	"context"
	"fmt"
)

// Semaphore is a counting semaphore: at most Permits holders of its name
// at once, across every process that uses the backend. Each permit is an
// ordinary *Lease, with its own fencing token (tokens strictly increase
// across all the permits granted for a name, on backends whose
// Capabilities say Fencing), Done, Err, Context, Refresh, Release and
// keep-alive. A semaphore of one permit behaves as a lock.
//
// Semaphores live in a namespace of their own: the semaphore "exports" and
// the lock "exports" are unrelated.
//
// The number of permits is stored with the semaphore on the backend while
// any permit is held (on a queueing backend, also while one is waited
// for): an acquisition through a Semaphore that names another number fails
// with an error wrapping ErrInvalidOption, so two configurations that
// disagree on the limit cannot silently both apply. Once every permit is
// free, the next acquisition's number applies: that is how the limit of a
// semaphore is changed.
//
// A Semaphore is cheap (it holds no server state) and safe for concurrent
// use. Permits are not reentrant: each Acquire takes one more permit, even
// from a goroutine that holds one already, so AcquireOptions.Owner must be
// empty.
type Semaphore struct {
	l       *Locker
	name    string
	permits int
}

// Semaphore returns the counting semaphore name with the given number of
// permits. It returns an error wrapping ErrUnsupported when the backend has
// no semaphores (Capabilities.MaxPermits is zero), ErrInvalidOption when
// permits is below 1 or above Capabilities.MaxPermits, and ErrInvalidName
// for a name the backend cannot store. It makes no server call.
func (l *Locker) Semaphore(name string, permits int) (*Semaphore, error) {
	if err := l.validateName(name); err != nil {
		return nil, fmt.Errorf("dlock: semaphore: %w", err)
	}
	switch max := l.caps.MaxPermits; {
	case max == 0:
		return nil, fmt.Errorf("dlock: semaphore %q: %w (%s has no semaphores)", name, ErrUnsupported, l.backendName())
	case permits < 1:
		return nil, fmt.Errorf("dlock: semaphore %q: %w: %d permits (at least 1)", name, ErrInvalidOption, permits)
	case permits > max:
		return nil, fmt.Errorf("dlock: semaphore %q: %w: %d permits exceeds %s's maximum of %d", name, ErrInvalidOption, permits, l.backendName(), max)
	}
	return &Semaphore{l: l, name: name, permits: permits}, nil
}

// backendName is "redis" or "postgres (forupdate)" for messages.
func (l *Locker) backendName() string {
	if l.caps.Strategy == "" {
		return l.caps.Backend
	}
	return l.caps.Backend + " (" + l.caps.Strategy + ")"
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the number of permits: the most holders at once.
func (s *Semaphore) Permits() int { return s.permits }

// Acquire blocks until it holds one of the permits, or ctx ends. When ctx
// ends it returns ctx.Err() unwrapped and leaves nothing behind on the
// server. The waiter learns that a permit was freed as the backend allows
// (Capabilities.SemaphoreWait).
func (s *Semaphore) Acquire(ctx context.Context, opts *AcquireOptions) (*Lease, error) {
	return s.l.acquire(ctx, s.name, s.permits, opts, true)
}

// TryAcquire makes one attempt to take a permit. It returns an error
// wrapping ErrNotAcquired at once when all of them are held.
func (s *Semaphore) TryAcquire(ctx context.Context, opts *AcquireOptions) (*Lease, error) {
	return s.l.acquire(ctx, s.name, s.permits, opts, false)
}

// Do acquires one of the permits (waiting as Acquire does), runs fn with a
// context that ends when the permit's lease ends or ctx ends, and always
// releases the permit, as the package-level Do does for a lock.
func (s *Semaphore) Do(ctx context.Context, opts *AcquireOptions, fn func(ctx context.Context, permit *Lease) error) error {
	return do(ctx, func() (*Lease, error) { return s.Acquire(ctx, opts) }, fn)
}

// permitsHeld is the error of an attempt on a semaphore whose permits are
// all held: errors.Is finds ErrNotAcquired in it.
type permitsHeld int

func (n permitsHeld) Error() string {
	if n == 1 {
		return "its one permit is held"
	}
	return fmt.Sprintf("all %d permits are held", int(n))
}

func (permitsHeld) Is(target error) bool { return target == ErrNotAcquired }
