// Package driver defines the interface that every dlock backend implements.
//
// Application code does not use this package: it uses the portable types in
// package dlock (*dlock.Locker and *dlock.Lease), which do, once for every
// backend, what is the same everywhere: argument checks, waiting, keep-alive,
// the local lease deadline, reentrancy, closing and error wrapping. A driver
// does only what its backend must: one attempt to acquire, refresh, release,
// and optionally a native way to wait.
//
// Each method's comment states the contract that the conformance suite
// (package github.com/dlock-go/dlock/conformance) checks.
package driver

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Drivers return them, wrapped or not; callers test with
// errors.Is. The root package re-exports them as dlock.ErrNotAcquired etc.
// Their texts carry no package prefix: the portable layer prefixes every
// error it returns with "dlock: " once, and a driver wraps with its own
// name ("redis: detail: %w"), so a message says each thing once:
// dlock: acquire "orders/42": redis: <detail>: lock is held by another owner.
var (
	// ErrNotAcquired: the lock is held by someone else (one attempt failed).
	ErrNotAcquired = errors.New("lock is held by another owner")
	// ErrNotHeld: the caller does not hold the lock (any more).
	ErrNotHeld = errors.New("lock is not held")
	// ErrLockLost: the lease ended without a release: expired, revoked by the
	// server, or its session or connection was lost.
	ErrLockLost = errors.New("lock lost")
	// ErrReleased: the lease ended because its holder released it.
	ErrReleased = errors.New("lease released")
	// ErrInvalidName: the lock name is empty, not UTF-8, too long, or not
	// storable by the backend.
	ErrInvalidName = errors.New("invalid lock name")
	// ErrInvalidOption: an option (a TTL, a URL parameter) is out of range or unknown.
	ErrInvalidOption = errors.New("invalid option")
	// ErrClosed: the Locker was closed.
	ErrClosed = errors.New("locker closed")
	// ErrUnsupported: the backend cannot do what was asked.
	ErrUnsupported = errors.New("unsupported by this backend")
	// ErrPoolExhausted: the attempt's context ended while it waited for a
	// connection of the driver's pool, every one of them in use. The
	// error wraps the context's error too; the portable layer returns it
	// (where it returns a context's error unwrapped otherwise), so that
	// the caller learns why the wait ended.
	ErrPoolExhausted = errors.New("every connection of the pool is in use")
)

// Request describes one attempt to acquire a lock. The portable layer has
// already validated every field: Name is non-empty UTF-8 within the driver's
// MaxNameLen and accepted by its NameValidator, TTL lies within the driver's
// declared [Capabilities.MinTTL, Capabilities.MaxTTL].
type Request struct {
	// Name is the lock name.
	Name string
	// TTL is the lease length. A TTL-bound driver makes the server expire the
	// lease TTL after the request started unless it is refreshed. A
	// session-bound driver (Capabilities.SessionBound) may ignore it.
	TTL time.Duration
	// Owner describes the holder for diagnostics (dlock status). It is not
	// the value that makes release safe: the driver generates its own unique
	// value per grant for that.
	Owner string
	// Permits is zero for a lock. For a counting semaphore it is the number
	// of permits N (1 ≤ N ≤ Capabilities.MaxPermits): the attempt asks for
	// one permit of the semaphore Name, which at most N grants hold at once
	// across every client. Semaphores live in a namespace of their own: the
	// semaphore "x" and the lock "x" are unrelated. The driver stores N with
	// the semaphore while any permit is held (or, for a queueing backend,
	// waited for): an attempt naming another N then fails with an error
	// wrapping ErrInvalidOption and changes nothing; once every permit is
	// free, the next attempt's N applies. Tokens strictly increase across
	// all the permits granted for a name (when Capabilities.Fencing). The
	// rest of the contract (TTL, refresh, release, loss, a cancelled wait
	// leaves nothing) is the lock's, per permit.
	Permits int
}

// Locker is the interface that a backend implements. A *dlock.Locker wraps
// exactly one driver.Locker. All methods must be safe for concurrent use.
type Locker interface {
	// TryAcquire makes one attempt to acquire req.Name.
	//
	// It returns a Lease when the lock was granted, and an error wrapping
	// ErrNotAcquired when another owner holds it. It must not wait for the
	// holder: its latency is bounded by a small number of round trips.
	// It must honour ctx; context errors are returned unwrapped or wrapped
	// (errors.Is must find them). When it returns an error, nothing of the
	// attempt may remain on the server that could block another acquirer.
	//
	// Each grant's Token must be greater than the token of every earlier
	// grant of the same name on this backend, unless Capabilities.Fencing is
	// false.
	TryAcquire(ctx context.Context, req Request) (Lease, error)

	// Capabilities reports what the backend guarantees. It must return the
	// same value on every call.
	Capabilities() Capabilities

	// Close releases the driver's resources (connections it opened, its
	// subscriptions). The portable layer has already ended every lease. It
	// must not close a client that was passed in by the user.
	Close() error
}

// Lease is one grant of a lock by a driver.
type Lease interface {
	// Token returns the fencing token of this grant.
	Token() uint64

	// Refresh extends the lease by ttl, measured from the start of the call.
	// It must succeed only while this grant still holds the lock on the
	// server; otherwise it returns an error wrapping ErrNotHeld and must not
	// re-create or extend anybody's lock. A session-bound driver verifies
	// that its session or connection is alive. Transient failures
	// (network) are returned as they are; the portable layer retries them
	// until the local deadline passes.
	Refresh(ctx context.Context, ttl time.Duration) error

	// Release frees the lock if and only if this grant still holds it. When
	// the lock is no longer held by this grant (expired, taken by another
	// owner) it returns an error wrapping ErrNotHeld and changes nothing.
	// The portable layer calls it at most once, with a context that is not
	// already cancelled. Refresh and Release of one lease may run
	// concurrently (a keep-alive in flight while the holder releases): a
	// driver whose connection cannot carry two requests at once serialises
	// them, and a Refresh that arrives after the Release must fail.
	Release(ctx context.Context) error

	// Lost returns a channel that the driver closes as soon as it learns
	// that the lease is gone (a session expired, a connection broke, the
	// server revoked it) — earlier than the portable layer's deadline would
	// notice. A driver that cannot tell returns nil.
	Lost() <-chan struct{}
}

// LossNotifier is implemented by leases that can report their loss by a
// callback as well as by their Lost channel. The portable layer then needs
// no goroutine per lease to wait on the channel (without it, it runs one
// for each lease whose Lost is non-nil).
type LossNotifier interface {
	// OnLost arranges for f to be called once, in a goroutine of its own,
	// when the lease is lost (when the channel Lost returns closes), or at
	// once if it already is. f is never called for a lease released
	// before it was lost. The portable layer calls OnLost at most once
	// per lease.
	OnLost(f func())
}

// Blocker is implemented by drivers whose backend can wait natively: a
// server-side queue (ZooKeeper sequential nodes, a SQL row lock, an
// advisory lock) or an in-process queue. The portable layer calls Acquire
// instead of looping over TryAcquire.
type Blocker interface {
	// Acquire blocks until the lock is granted or ctx ends. When ctx ends
	// it returns ctx.Err() (possibly wrapped) and leaves nothing behind: no
	// queued node, row or waiter; the clean-up uses a fresh bounded context.
	//
	// Because a blocking grant may happen long after the call started, the
	// returned lease must implement Granted, reporting a local time at or
	// before the moment the server started the lease's TTL.
	//
	// The portable layer calls it for a semaphore (req.Permits > 0) only
	// when Capabilities.SemaphoreWait is WaitQueue; otherwise semaphore
	// waits go through TryAcquire and Watch.
	Acquire(ctx context.Context, req Request) (Lease, error)
}

// Granted is implemented by leases whose grant time differs from the start
// of the request that produced them (those returned by Blocker.Acquire).
type Granted interface {
	// GrantedAt returns a local time, read from the monotonic clock, at or
	// before the moment the server began the lease's TTL: the server holds
	// the lease at least until GrantedAt + TTL unless it is released or
	// revoked (a lease whose server-side life is longer than the TTL, as
	// etcd's spare leases, may report a later time than its last renewal,
	// as long as that still holds).
	GrantedAt() time.Time
}

// Watcher is implemented by drivers that can tell a waiter when a name may
// have become free (Redis pub/sub, PostgreSQL LISTEN/NOTIFY). The portable
// layer watches only once an attempt has failed (a free lock costs no
// watch): it tries, and after ErrNotAcquired it calls Watch, tries again,
// then waits on the channel and tries after each wake-up. The second try
// is what makes a release between the first try and the Watch, or between
// any try and the wait, not missed.
type Watcher interface {
	// Watch registers interest in releases of name. The returned channel
	// receives a value after a release of name that happened after an
	// attempt of this Locker failed after Watch returned. A driver may wake
	// only some watchers per release (a queue), as long as each release
	// wakes at least one registered watcher. Spurious wake-ups are allowed,
	// missed ones must be rare (the portable layer also waits on a fallback
	// timer). A closed channel makes the portable layer poll instead. stop
	// unregisters and must be called exactly once.
	//
	// For a semaphore (req.Permits > 0, only when Capabilities.SemaphoreWait
	// is WaitNotify) the channel receives after a permit of req.Name was
	// freed. Only req.Name and req.Permits are meaningful.
	Watch(ctx context.Context, req Request) (wake <-chan struct{}, stop func(), err error)
}

// NameValidator is implemented by drivers that cannot store every UTF-8
// name up to Capabilities.MaxNameLen bytes. ValidateName returns an error
// wrapping ErrInvalidName for a name the backend cannot store. It must not
// contact the server.
type NameValidator interface {
	ValidateName(name string) error
}

// WaitKind says how a backend's waiters learn that a lock became free.
type WaitKind string

const (
	// WaitQueue: a queue that grants the lock to a waiter (in-process queue,
	// ZooKeeper sequential nodes, a SQL server's lock queue).
	WaitQueue WaitKind = "queue"
	// WaitNotify: waiters are woken by a notification and then try again
	// (Redis pub/sub, PostgreSQL LISTEN/NOTIFY, a ZooKeeper watch).
	WaitNotify WaitKind = "notify"
	// WaitPoll: waiters retry with capped exponential backoff and jitter.
	WaitPoll WaitKind = "poll"
)

// Capabilities says what a backend guarantees. The README's capability
// table is generated from these values.
type Capabilities struct {
	// Backend is a short name: "memory", "redis", "zookeeper", ...
	Backend string
	// Strategy names the locking strategy within the backend ("set-nx",
	// "redlock", "forupdate", "version", "advisory", "getlock", "fair", ...).
	Strategy string
	// Fencing: tokens strictly increase across successive holders of a name.
	Fencing bool
	// FencingNote says what the token is ("INCR counter", "czxid", ...) or
	// why fencing is not promised.
	FencingNote string
	// TokensSurviveRestart: tokens keep increasing across a server restart.
	TokensSurviveRestart bool
	// Fair: waiters are granted in arrival order.
	Fair bool
	// Wait says how waiters are woken.
	Wait WaitKind
	// SessionBound: the lease lives as long as a session or connection,
	// not a TTL on the server. The driver signals loss through Lease.Lost
	// and the portable layer does not enforce a TTL deadline.
	SessionBound bool
	// ReleaseOnCrash is an upper bound on how long after the holder's
	// process dies the lock becomes free: 0 means at once (the connection
	// closes); -1 means "the lease TTL". Other values are durations.
	ReleaseOnCrash time.Duration
	// MaxNameLen is the longest name in bytes the backend stores (0 means
	// the portable limit of 1024 bytes).
	MaxNameLen int
	// MinTTL and MaxTTL are the range of lease lengths the backend honours:
	// a lease asked for with a TTL in [MinTTL, MaxTTL] is held on the server
	// for at least that TTL unless refreshed or released, with no rounding
	// down, truncation or overflow on the way to the server. The portable
	// layer refuses a TTL outside the range with ErrInvalidOption before any
	// server call, so a driver never sees one. Zero MinTTL means the
	// portable minimum (dlock.MinTTL); every driver declares MaxTTL (zero
	// means no limit, which only an in-process backend can promise). A
	// session-bound backend that ignores the TTL still declares the range it
	// accepts.
	MinTTL, MaxTTL time.Duration
	// MaxPermits is the largest number of permits a semaphore may have on
	// this backend (Request.Permits); zero means the backend has no
	// semaphores, and Locker.Semaphore returns ErrUnsupported.
	MaxPermits int
	// SemaphoreWait says how a semaphore's waiters learn that a permit was
	// freed: WaitQueue (the driver is a Blocker and its Acquire takes
	// semaphore requests), WaitNotify (the driver is a Watcher of
	// semaphores) or WaitPoll. Empty when MaxPermits is zero.
	SemaphoreWait WaitKind
	// SemaphoreFair: a semaphore's waiters get permits in arrival order.
	SemaphoreFair bool
	// Reentrant is set by the portable layer, which makes every backend
	// reentrant for a non-empty AcquireOptions.Owner; drivers leave it false.
	Reentrant bool
	// Notes are free-form remarks for the capability table.
	Notes string
}

// Drift is the safety margin the portable layer subtracts from a TTL when
// it computes a lease's local deadline: 1% of the TTL plus 2ms, as in
// Redlock's validity rule, for clock-rate differences and the time a
// request takes to reach the server.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// ReleaseAfterTTL is the value of Capabilities.ReleaseOnCrash for backends
// whose locks outlive a dead holder by at most the lease TTL.
const ReleaseAfterTTL time.Duration = -1

// NotAcquiredError is an error a driver may return from TryAcquire instead of
// a bare ErrNotAcquired, to tell the portable layer when the current holder's
// lease ends at the latest (a Redis PTTL, a SQL expiry): a waiter then sleeps
// no longer than that before trying again. errors.Is(err, ErrNotAcquired)
// holds for it.
type NotAcquiredError struct {
	// RetryAfter is how long the current holder's lease may still last;
	// zero means unknown.
	RetryAfter time.Duration
	// Reason, when set, says why the attempt failed where that was not
	// (only) another owner holding the lock: a Redlock quorum missed
	// because nodes answered late or votes split between attempts. The
	// error then reads "lock not acquired: <Reason>".
	Reason string
}

func (e *NotAcquiredError) Error() string {
	if e.Reason != "" {
		return "lock not acquired: " + e.Reason
	}
	return ErrNotAcquired.Error()
}

// Is reports whether target is ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// Inspector is implemented by drivers that can report a lock's state
// without taking it (used by "dlock status").
type Inspector interface {
	// Inspect returns what the backend knows about name. Fields it cannot
	// know are left zero.
	Inspect(ctx context.Context, name string) (Info, error)
}

// Info is what a backend can say about a lock.
type Info struct {
	// Held reports whether some owner holds the lock now.
	Held bool
	// Owner is the holder's Request.Owner, where the backend stores it.
	Owner string
	// TTL is how long the current lease may still last (0: unknown or none).
	TTL time.Duration
	// Fence is the last fencing token issued for the name (0: unknown).
	Fence uint64
	// Waiters is the number of queued waiters (-1: unknown).
	Waiters int
}
