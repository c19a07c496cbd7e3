package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/batch"
	"github.com/dlock-go/dlock/internal/layout"
)

// TTL range. etcd grants leases in whole seconds, and no shorter than its
// minimum of 1.5 × the election timeout (rounded up: 2s with the default
// 1s election timeout), so a shorter TTL would be silently lengthened.
// Its longest lease is 9,000,000,000 seconds; the driver declares ten
// years, as the SQL version strategy does.
const (
	MinTTL = 2 * time.Second
	MaxTTL = 3650 * 24 * time.Hour
)

// cleanupTimeout bounds the clean-up (a key's delete, a lease revoke) of a
// failed or cancelled attempt, the background revokes and Close's revoke
// of the spare leases.
const cleanupTimeout = 5 * time.Second

// OpenLocker returns a Locker that uses cli, a client the caller opened and
// keeps: Close never closes it. It makes no server call; it returns an
// error wrapping dlock.ErrInvalidOption if cli is nil or opts.Prefix is
// invalid.
func OpenLocker(cli *clientv3.Client, opts *Options) (*dlock.Locker, error) {
	if cli == nil {
		return nil, fmt.Errorf("etcd: OpenLocker needs a client: %w", driver.ErrInvalidOption)
	}
	prefix, err := opts.prefix()
	if err != nil {
		return nil, err
	}
	var obs dlock.Observer
	if opts != nil {
		obs = opts.Observer
	}
	return dlock.NewLockerWith(newLocker(cli, false, prefix), &dlock.Options{Observer: obs}), nil
}

// locker is the driver.Locker of one etcd client.
type locker struct {
	cli    *clientv3.Client
	own    bool              // Close closes cli
	clog   *driver.ClientLog // cli's logger, when opened from a URL
	prefix string

	// closing ends with Close: every call in flight is cancelled through
	// it (see op), and waiters return ErrClosed.
	closing context.Context
	close   context.CancelFunc
	once    sync.Once

	// mu guards closed and the WaitGroup's Add against Close's Wait.
	mu     sync.Mutex
	closed bool
	// wg counts acquisitions in flight, background revokes, lease
	// watches and the spares' renewals: Close waits for them before it
	// closes the client.
	wg sync.WaitGroup

	spares    spares    // etcd leases without keys for the next acquisitions
	renewer   renewer   // renews leases on one keep-alive stream
	refresher refresher // batches the leases' refreshes
	watcher   watcher   // watches the waiters' predecessors on one watch stream

	wmu       sync.Mutex
	watchKept bool // the waiters' watch stream is kept open (watchstream.go)
}

var (
	_ driver.Locker    = (*locker)(nil)
	_ driver.Blocker   = (*locker)(nil)
	_ driver.Inspector = (*locker)(nil)
)

func newLocker(cli *clientv3.Client, own bool, prefix string) *locker {
	l := &locker{cli: cli, own: own, prefix: prefix}
	l.spares.l = l
	l.renewer.l = l
	l.refresher.l = l
	l.refresher.batch = batch.Batcher[*refreshCall]{Max: maxRefreshBatch, Send: l.refresher.sendBatch}
	l.watcher.l = l
	l.closing, l.close = context.WithCancel(context.Background())
	return l
}

func (l *locker) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Backend:              "etcd",
		Strategy:             "revision",
		Fencing:              true,
		FencingNote:          "create revision of the attempt's key: etcd's global revision, never reset (survives restarts and leader changes)",
		TokensSurviveRestart: true,
		Fair:                 true,
		Wait:                 driver.WaitQueue,
		ReleaseOnCrash:       driver.ReleaseAfterTTL,
		MinTTL:               MinTTL,
		MaxTTL:               MaxTTL,
		MaxPermits:           MaxPermits,
		SemaphoreWait:        driver.WaitQueue,
		SemaphoreFair:        true,
		Notes: "a key per attempt under an etcd lease of the TTL (rounded up to whole seconds; a second more from 10s, so that an acquisition within 0.9s of its lease's renewal needs none); " +
			"the lowest create revision holds, each waiter watches its predecessor; the lease is renewed and the key re-checked after waiting; " +
			"a dead holder's lock may outlive its TTL by that second, and by more after a leader change (which renews every lease on the server)",
	}
}

// enter registers a call with Close; it fails once the Locker is closed.
func (l *locker) enter() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("etcd: %w", driver.ErrClosed)
	}
	l.wg.Add(1)
	return nil
}

func (l *locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *locker) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.close()
		l.wg.Wait()
		l.spares.drain()
		if l.own {
			_ = l.cli.Close()
		}
	})
	return nil
}

// op returns ctx, also cancelled when the Locker closes.
func (l *locker) op(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

// cleanupCtx is a fresh bounded context for a clean-up: never the caller's
// (perhaps cancelled) one, and not cut short by Close, which waits for it.
func cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), cleanupTimeout)
}

// wrapErr gives a client error the package prefix, maps a call cut short by
// Close onto ErrClosed and a lease that is gone onto ErrNotHeld. Context
// errors of the caller pass through.
func (l *locker) wrapErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case l.isClosed():
		return fmt.Errorf("etcd: %w: %w", driver.ErrClosed, err)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("etcd: %w", driver.ErrNotHeld)
	}
	return fmt.Errorf("etcd: %w", err)
}

// keyOf returns the key of an attempt in queue under the etcd lease id
// granted with tag (layout.EtcdKey). Its attempts, one at a time (a spare
// is taken by one and put back once its key is deleted), reuse the name:
// a name per attempt would leave a deleted key per lock use in the
// server's index until a compaction, which every read of the queue walks
// through.
func keyOf(queue string, id clientv3.LeaseID, tag uint64) string {
	return layout.EtcdKey(queue, int64(id), tag)
}

// grantTag draws the tag of a new etcd lease grant (keyOf).
func grantTag() uint64 { return rand.Uint64() }

// ttlSeconds is the etcd lease TTL for ttl: whole seconds, rounded up
// (never down: the server must hold the lease at least ttl).
func ttlSeconds(ttl time.Duration) int64 {
	s := int64(ttl / time.Second)
	if ttl%time.Second != 0 {
		s++
	}
	return max(s, 1)
}

func (l *locker) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	return l.acquire(ctx, req, false)
}

func (l *locker) Acquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	return l.acquire(ctx, req, true)
}

func (l *locker) acquire(ctx context.Context, req driver.Request, wait bool) (driver.Lease, error) {
	if err := l.enter(); err != nil {
		return nil, err
	}
	defer l.wg.Done()
	octx, cancel := l.op(ctx)
	defer cancel()
	for {
		a := l.newAttempt(req)
		q, err := a.enqueue(octx)
		if errors.Is(err, errRequeue) {
			a.abandon()
			continue
		}
		if err != nil {
			a.abandon()
			return nil, l.wrapErr(ctx, err)
		}
		holder, err := a.holds(req.Name, q)
		if err != nil {
			a.abandon()
			return nil, fmt.Errorf("etcd: %w", err)
		}
		if holder {
			return a.grant(a.start), nil
		}
		if !wait {
			a.abandon()
			return nil, fmt.Errorf("etcd: %w", driver.ErrNotAcquired)
		}
		var ls driver.Lease
		if a.permits > 0 {
			ls, err = a.waitPermit(octx)
		} else {
			ls, err = a.wait(octx)
		}
		if errors.Is(err, errRequeue) {
			continue // a.wait abandoned the attempt: queue again
		}
		if err != nil {
			a.abandon()
			if l.isClosed() {
				return nil, fmt.Errorf("etcd: %w", driver.ErrClosed)
			}
			return nil, l.wrapErr(ctx, err)
		}
		return ls, nil
	}
}
