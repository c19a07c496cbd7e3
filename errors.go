package dlock

import "github.com/dlock-go/dlock/driver"

// Errors returned by dlock. Test for them with errors.Is: drivers and the
// portable layer wrap them with the lock name and the backend's detail.
// Context errors (context.Canceled, context.DeadlineExceeded) are returned
// as they are, not wrapped, except by ErrPoolExhausted, which says why the
// context ran out (errors.Is finds both).
var (
	// ErrNotAcquired: TryAcquire found the lock held by another owner.
	ErrNotAcquired = driver.ErrNotAcquired
	// ErrNotHeld: Refresh or Release of a lease that no longer holds its lock.
	ErrNotHeld = driver.ErrNotHeld
	// ErrLockLost: Lease.Err after the lease ended without a release:
	// it expired, the server revoked it, or its session or connection broke.
	ErrLockLost = driver.ErrLockLost
	// ErrReleased: Lease.Err after the holder released the lease.
	ErrReleased = driver.ErrReleased
	// ErrInvalidName: the lock name is empty, not valid UTF-8, longer than
	// 1024 bytes (or the backend's limit), or one the backend cannot store.
	ErrInvalidName = driver.ErrInvalidName
	// ErrInvalidOption: a TTL out of range, a malformed URL, an unknown URL
	// parameter.
	ErrInvalidOption = driver.ErrInvalidOption
	// ErrClosed: the Locker was closed.
	ErrClosed = driver.ErrClosed
	// ErrUnsupported: the backend cannot do what was asked.
	ErrUnsupported = driver.ErrUnsupported
	// ErrPoolExhausted: an Acquire's context ended while it waited for a
	// connection of a full pool (each held forupdate lease pins one, and a
	// waiting advisory or getlock Acquire needs one of its own); the error
	// wraps the context's error too.
	ErrPoolExhausted = driver.ErrPoolExhausted
)
