package sqllock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// queueing is a Version Locker whose waiters queue on the server for a
// grant (VersionQueuer on a Notifier pool): a release hands the lease to
// the first live waiter in its own statement and notifies the waiter's
// Locker, which takes it without a request of its own. Semaphores' waiters
// still watch (Watch).
type queueing struct{ watching }

// queues reports whether l's version waiters queue (queueing).
func (l *Locker) queues() bool {
	_, ok := l.d.(VersionQueuer)
	return ok && l.strategy == Version && l.hub != nil
}

// Grant queue timing. A queued waiter's entry lasts queueEntry on the
// server's clock unless renewed; its waiter renews it every
// renewEvery(TTL), so that a grant whose notification was lost is found
// within that, and a grant reaching the waiter by notification is at most
// that old when counted from the renewal before it.
const (
	queueEntry    = 3 * time.Second
	renewMin      = 10 * time.Millisecond
	renewMax      = time.Second
	unheardPolled = 50 * time.Millisecond // the renewal period while no listener runs
)

// renewEvery is a queued waiter's renewal period: a quarter of the TTL,
// between renewMin and renewMax.
func renewEvery(ttl time.Duration) time.Duration { return min(max(ttl/4, renewMin), renewMax) }

// Acquire waits in the name's grant queue. Its first statement takes a
// free lease or queues the waiter; the waiter then receives its grant
// from the releasing statement's notification, and renews its entry
// every renewEvery(TTL) (the statement that also takes a free lease, a
// holder's expired one, or a grant whose notification was lost).
// Semaphores declare WaitNotify: the portable layer never calls Acquire
// for them.
func (q queueing) Acquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	if req.Permits > 0 {
		return nil, fmt.Errorf("%s: acquire: %w: a semaphore's waiters are woken (Watch), not queued", q.d.Backend(), driver.ErrUnsupported)
	}
	return q.acquireQueued(ctx, req)
}

func (l *Locker) acquireQueued(ctx context.Context, req driver.Request) (driver.Lease, error) {
	if err := l.ensure(ctx); err != nil {
		return nil, ctxErr(ctx, err)
	}
	vq := l.d.(VersionQueuer)
	r := Req{Name: req.Name, Owner: req.Owner, TTL: req.TTL, Nonce: newNonce(), Channel: l.hub.grantChannel}
	// The first attempt is TryAcquire's, whose statement costs a free
	// lease 50us less than VersionWait's (the listener, started at the
	// Locker's first use, is not needed for it), unless the name was
	// held at this Locker's last Acquire of it (contended): that try
	// would most likely fail, a statement and a round trip more per
	// grant. When it fails the waiter queues at once, registered with
	// the listener before the statement that queues it: a release may
	// grant it the lease as soon as that statement has committed, before
	// its reply is read. With no listener running (not started yet, or
	// dead) it queues all the same, so that its place is its arrival's,
	// then starts one and renews at once, which takes a grant made
	// meanwhile. VersionWait takes a free lease as the try does.
	skipped := l.contended.Has(req.Name)
	if !skipped {
		if ls, err := l.acquireVersion(ctx, req, false); !errors.Is(err, driver.ErrNotAcquired) {
			return ls, err
		}
	}
	grants := l.hub.awaitGrant(r.Nonce)
	defer l.hub.endGrant(r.Nonce)
	every := renewEvery(req.TTL)
	var (
		timer *time.Timer
		// safe is the start of the last statement that found the waiter
		// queued: a grant came after it, so a lease counted from it ends
		// no later than on the server.
		safe time.Time
		// waited: a statement found the waiter queued.
		waited bool
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		start := time.Now()
		var token, remaining *int64
		var queued *bool
		found, err := l.pool.Run(ctx, vq.VersionWait(l.t, r, queueEntry), &token, &remaining, &queued)
		if err == nil && !found {
			err = errors.New("the wait statement returned no row")
		}
		if err != nil {
			l.cancelQueued(ctx, r)
			return nil, ctxErr(ctx, l.errorf("acquire %q: %w", req.Name, err))
		}
		if token != nil {
			if skipped && !waited {
				l.contended.Delete(req.Name) // found free
			}
			ls := l.queuedLease(r, *token, start)
			ls.queued = queued != nil && *queued
			return ls, nil
		}
		if !waited {
			l.contended.Add(req.Name)
			waited = true
		}
		safe = start
		if grants == nil {
			// No listener (not yet, or it died): start one, and renew at
			// once. If none can start, the waiter polls.
			if err := l.hub.start(ctx); err == nil {
				if grants = l.hub.awaitGrant(r.Nonce); grants != nil {
					continue // renew at once: a grant made before is found
				}
			}
		}
		wait := every
		if grants == nil {
			wait = min(wait, unheardPolled)
		}
		if remaining != nil && *remaining >= 0 {
			// The holder's lease ends then unless refreshed: try at once
			// after, rather than at the next renewal.
			wait = min(wait, FromMicros(*remaining)+time.Millisecond)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case token, ok := <-grants:
			if !ok {
				grants = nil // the listener died: renew now, then start another
				continue
			}
			ls := l.queuedLease(r, token, safe)
			if time.Since(safe) <= req.TTL/4 {
				return ls, nil
			}
			// Queued long since the last renewal: refresh once, so that
			// the lease is not counted from long ago.
			s := time.Now()
			err := ls.Refresh(ctx, req.TTL)
			if err == nil {
				ls.at = s
				return ls, nil
			}
			if !errors.Is(err, driver.ErrNotHeld) {
				if ctx.Err() != nil {
					l.cancelQueued(ctx, r)
					return nil, ctx.Err()
				}
				return ls, nil // counted from safe, which holds
			}
			// The grant is gone already (it expired): queue again.
		case <-timer.C:
		case <-ctx.Done():
			l.cancelQueued(ctx, r)
			return nil, ctx.Err()
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// Listen starts l's listener now, unless it runs or l has none (it
// starts in the background at l's first use, when l's waiters queue):
// tests that count round trips wait for it with this.
func (l *Locker) Listen(ctx context.Context) error {
	if err := l.ensure(ctx); err != nil || l.hub == nil {
		return err
	}
	return l.hub.start(ctx)
}

// queuedLease is the lease granted to the queued waiter r with token,
// counted from at. Its release hands over at once (VersionHandover):
// a lease granted to a queued waiter has others queued behind it, as a
// rule.
func (l *Locker) queuedLease(r Req, token int64, at time.Time) *versionLease {
	r.Token = token
	r.Channel = l.t.Channel
	return &versionLease{l: l, r: r, at: at, queued: true}
}

// cancelQueued takes the queued waiter r back (VersionAbort): its entry
// leaves the queue, and a grant that reached it meanwhile is handed on.
func (l *Locker) cancelQueued(ctx context.Context, r Req) {
	r.Channel = l.t.Channel
	l.abortVersion(ctx, r)
}
