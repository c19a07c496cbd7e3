package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/stats"
)

// opts returns the suite's default acquire options: the base TTL with
// keep-alive.
func (c *caseT) opts() *dlock.AcquireOptions { return &dlock.AcquireOptions{TTL: c.ttl()} }

// holdOpts returns options for a holder whose lease length is not under
// test: 5×TTL with keep-alive, so that a keep-alive starved on a loaded
// machine does not end it during the case.
func (c *caseT) holdOpts() *dlock.AcquireOptions { return &dlock.AcquireOptions{TTL: 5 * c.ttl()} }

// noKeepAlive returns options for a lease of the base TTL that is never
// refreshed.
func (c *caseT) noKeepAlive() *dlock.AcquireOptions {
	return &dlock.AcquireOptions{TTL: c.ttl(), NoKeepAlive: true}
}

// quick returns a context for a call that must not wait for a holder.
func (c *caseT) quick() (context.Context, context.CancelFunc) {
	return c.withTimeout(c.fast() + time.Second)
}

// mustTry takes a free lock or ends the case.
func (c *caseT) mustTry(l *dlock.Locker, name string, opts *dlock.AcquireOptions) *dlock.Lease {
	ctx, cancel := c.withTimeout(c.fast() + 5*time.Second)
	defer cancel()
	ls, err := l.TryAcquire(ctx, name, opts)
	if err != nil {
		c.Fatalf("TryAcquire of the free name %q: %v", name, err)
	}
	return ls
}

// release releases ls and reports an error.
func (c *caseT) release(ls *dlock.Lease, what string) {
	ctx, cancel := c.withTimeout(c.fast() + 5*time.Second)
	defer cancel()
	if err := ls.Release(ctx); err != nil {
		c.Errorf("%s: Release: %v", what, err)
	}
}

// expectHeld checks that another client cannot take name now.
func (c *caseT) expectHeld(l *dlock.Locker, name, why string) bool {
	ctx, cancel := c.withTimeout(c.fast() + time.Second)
	defer cancel()
	ls, err := l.TryAcquire(ctx, name, c.opts())
	if err == nil {
		c.Errorf("%s: another client's TryAcquire of %q succeeded (token %d), want ErrNotAcquired", why, name, ls.Token())
		_ = ls.Release(ctx)
		return false
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		c.Errorf("%s: TryAcquire of %q returned %v, want ErrNotAcquired", why, name, err)
		return false
	}
	return true
}

// expectFree checks that another client can take name now (and releases it).
func (c *caseT) expectFree(l *dlock.Locker, name, why string) bool {
	ctx, cancel := c.withTimeout(c.fast() + 5*time.Second)
	defer cancel()
	ls, err := l.TryAcquire(ctx, name, c.opts())
	if err != nil {
		c.Errorf("%s: TryAcquire of %q: %v, want it free", why, name, err)
		return false
	}
	_ = ls.Release(ctx)
	return true
}

// acq is the outcome of an Acquire run in the background.
type acq struct {
	ls  *dlock.Lease
	err error
	at  time.Time
}

// acquireAsync runs Acquire in the background.
func (c *caseT) acquireAsync(ctx context.Context, l *dlock.Locker, name string, opts *dlock.AcquireOptions) <-chan acq {
	ch := make(chan acq, 1)
	go func() {
		ls, err := l.Acquire(ctx, name, opts)
		ch <- acq{ls, err, time.Now()}
	}()
	return ch
}

// waitDone waits up to d for ls to end and reports whether it did.
func waitDone(ls *dlock.Lease, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ls.Done():
		return true
	case <-t.C:
		return false
	}
}

// sleep waits d or until the case's context ends.
func (c *caseT) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.ctx.Done():
		c.Fatalf("watchdog: %v", c.ctx.Err())
	}
}

// median is the one median of the project's measurements (0 for none).
var median = stats.Median

// crashBound is the backend's stated bound from a holder's death to the
// lock being free.
func (c *caseT) crashBound() time.Duration {
	switch d := c.caps.ReleaseOnCrash; {
	case d < 0:
		return c.ttl()
	default:
		return d
	}
}
