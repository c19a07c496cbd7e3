package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Client is one lock user: its own connection or session, used by one
// goroutine at a time.
type Client interface {
	// Acquire blocks until name is held or ctx ends.
	Acquire(ctx context.Context, name string) (Held, error)
	// FailedAttempts is the number of attempts so far that found the lock
	// taken and had to retry (0 for implementations that queue natively).
	FailedAttempts() uint64
	Close() error
}

// Held is a granted lock.
type Held interface {
	// Token is the fencing token, 0 when the implementation has none.
	Token() uint64
	Release(ctx context.Context) error
}

// opener makes a client for a target.
type opener func(ctx context.Context, t Target) (Client, error)

// openers maps Target.Impl to its constructor for peers, floors and RTT.
var openers = implementations()

// Open connects one client of t.
func Open(ctx context.Context, t Target) (Client, error) {
	if t.Kind == KindDlock {
		return openDlock(ctx, t)
	}
	op := openers[t.Impl]
	if op == nil {
		return nil, fmt.Errorf("bench: unknown implementation %q for target %s", t.Impl, t.Name)
	}
	return op(ctx, t)
}

// fencing reports whether c's tokens must strictly increase across
// holders of a name: true for dlock backends whose Capabilities say so.
func fencing(c Client) bool {
	f, ok := c.(interface{ Fencing() bool })
	return ok && f.Fencing()
}

// dlockClient is a *dlock.Locker of its own: a separate client of the
// backend, as a separate process would have.
type dlockClient struct {
	l    *dlock.Locker
	cnt  *countingDriver
	opts *dlock.AcquireOptions
}

func openDlock(ctx context.Context, t Target) (Client, error) {
	l0, err := dlock.Open(ctx, t.URL)
	if err != nil {
		return nil, err
	}
	drv, cd := countAttempts(l0.Driver())
	return &dlockClient{
		l:    dlock.NewLocker(drv),
		cnt:  cd,
		opts: &dlock.AcquireOptions{TTL: rowTTL(l0.Capabilities())},
	}, nil
}

// countAttempts re-wraps a driver so that its failed attempts can be
// counted, keeping the optional interfaces that the portable layer looks
// for on the hot path (Blocker, Watcher, NameValidator: a row measures what
// a user's Locker does, the driver's own name checks included). Inspector
// and ClientLogger are not kept: dlockbench neither inspects nor observes.
func countAttempts(inner driver.Locker) (driver.Locker, *countingDriver) {
	cd := &countingDriver{Locker: inner}
	if v, ok := inner.(driver.NameValidator); ok {
		cd.validate = v.ValidateName
	}
	var drv driver.Locker = cd
	b, isB := inner.(driver.Blocker)
	w, isW := inner.(driver.Watcher)
	switch {
	case isB && isW:
		drv = struct {
			*countingDriver
			driver.Blocker
			driver.Watcher
		}{cd, b, w}
	case isB:
		drv = struct {
			*countingDriver
			driver.Blocker
		}{cd, b}
	case isW:
		drv = struct {
			*countingDriver
			driver.Watcher
		}{cd, w}
	}
	return drv, cd
}

func (c *dlockClient) Acquire(ctx context.Context, name string) (Held, error) {
	ls, err := c.l.Acquire(ctx, name, c.opts)
	if err != nil {
		return nil, err
	}
	return lease{ls}, nil
}

func (c *dlockClient) Fencing() bool          { return c.l.Capabilities().Fencing }
func (c *dlockClient) FailedAttempts() uint64 { return c.cnt.failed.Load() }
func (c *dlockClient) Close() error           { return c.l.Close() }

// rowTTL is the lease a dlock row asks for: LeaseTTL, or the driver's
// MinTTL when LeaseTTL is shorter (etcd's is 2s: EtcdTTL, whose rows' notes
// say so), since the portable layer refuses a TTL below it.
func rowTTL(c driver.Capabilities) time.Duration { return max(LeaseTTL, c.MinTTL) }

type lease struct{ *dlock.Lease }

func (l lease) Release(ctx context.Context) error { return l.Lease.Release(ctx) }

// countingDriver counts the TryAcquire calls that found the lock taken.
type countingDriver struct {
	driver.Locker
	failed   atomic.Uint64
	validate func(name string) error // the driver's NameValidator, if any
}

// ValidateName applies the wrapped driver's own name rules, if it has any.
func (c *countingDriver) ValidateName(name string) error {
	if c.validate == nil {
		return nil
	}
	return c.validate(name)
}

func (c *countingDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	l, err := c.Locker.TryAcquire(ctx, req)
	if errors.Is(err, driver.ErrNotAcquired) {
		c.failed.Add(1)
	}
	return l, err
}

// noToken is a Held without a fencing token.
type noToken struct {
	release func(ctx context.Context) error
}

func (n noToken) Token() uint64                     { return 0 }
func (n noToken) Release(ctx context.Context) error { return n.release(ctx) }

// retryClient turns a one-attempt acquire (a floor) into a blocking one
// with a short fixed pause; floors only run uncontended, where the first
// attempt succeeds.
type retryClient struct {
	try    func(ctx context.Context, name string) (Held, bool, error)
	close  func() error
	failed atomic.Uint64
}

func (c *retryClient) Acquire(ctx context.Context, name string) (Held, error) {
	for {
		h, ok, err := c.try(ctx, name)
		if err != nil || ok {
			return h, err
		}
		c.failed.Add(1)
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *retryClient) FailedAttempts() uint64 { return c.failed.Load() }
func (c *retryClient) Close() error           { return c.close() }
