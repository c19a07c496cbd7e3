package dlock

import (
	"context"
	"errors"
)

// Do acquires name on l (waiting as Acquire does), runs fn with a context
// that ends when the lease ends or ctx ends, and always releases the lock,
// even when fn panics or ctx was cancelled meanwhile; the release ends by
// ctx's deadline, or within ReleaseTimeout when ctx has none or had already
// ended, even when the server does not answer. It returns fn's error;
// if fn returned nil but the lease was lost while it ran, it returns an
// error wrapping ErrLockLost, because fn's work may have overlapped with
// another holder's (use Lease.Token to fence it).
func Do(ctx context.Context, l *Locker, name string, opts *AcquireOptions, fn func(ctx context.Context, lease *Lease) error) error {
	return do(ctx, func() (*Lease, error) { return l.Acquire(ctx, name, opts) }, fn)
}

// do is Do and Semaphore.Do once the lease is acquired by acquire.
func do(ctx context.Context, acquire func() (*Lease, error), fn func(ctx context.Context, lease *Lease) error) (err error) {
	lease, err := acquire()
	if err != nil {
		return err
	}
	lctx, cancel := lease.Context(ctx)
	defer func() {
		cancel()
		lost := lease.Err()
		// ctx while it lives (its deadline bounds the release too), a fresh
		// context once it has ended; ReleaseTimeout bounds either.
		relErr := lease.Release(ctx)
		switch {
		case err != nil:
		case lost != nil && !errors.Is(lost, ErrReleased):
			err = lost
		case relErr != nil:
			err = relErr
		}
	}()
	return fn(lctx, lease)
}
