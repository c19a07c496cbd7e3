package sqllock

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// acquireVersion makes one attempt at the Version strategy: a conditional
// write of the lease row whose expiry the server computes with its own
// clock. No connection stays pinned. hint: a failed attempt's error says
// how long the holder's lease still lasts (RetryAfter) when the dialect
// can tell; without it (a blocking Acquire's first try, which queues
// next) a VersionPeeker's miss costs no second statement.
func (l *Locker) acquireVersion(ctx context.Context, req driver.Request, hint bool) (driver.Lease, error) {
	if err := l.ensure(ctx); err != nil {
		return nil, ctxErr(ctx, err)
	}
	r := Req{Name: req.Name, Owner: req.Owner, TTL: req.TTL, NoWait: true, Nonce: newNonce(), Channel: l.t.Channel}
	_, creates := l.d.(RowCreator)
	known := !creates || l.rows.Has(r.Name)
	r.Create = !known
	var token, remaining *int64
	var (
		found bool
		err   error
	)
	if p, peeks := l.d.(VersionPeeker); peeks && known {
		// The floor's UPDATE: a row only when it took the lease.
		found, err = l.pool.Run(ctx, l.d.VersionAcquire(l.t, r), &token)
		if err == nil && !found {
			if !hint {
				return nil, l.notAcquired()
			}
			// Held, or the row is gone (dropped by hand): the row says.
			found, err = l.pool.Run(ctx, p.VersionPeek(l.t, r), &remaining)
			token = nil
			if err == nil && !found {
				r.Create = true
				found, err = l.pool.Run(ctx, l.d.VersionAcquire(l.t, r), &token, &remaining)
			}
		}
	} else {
		found, err = l.pool.Run(ctx, l.d.VersionAcquire(l.t, r), &token, &remaining)
	}
	if err == nil && !found {
		// No row yet (a dialect may report that): create it, try again.
		if creates {
			r.Create = true
		} else {
			_, err = l.pool.Run(ctx, l.d.EnsureRow(l.t, r))
		}
		if err == nil {
			found, err = l.pool.Run(ctx, l.d.VersionAcquire(l.t, r), &token, &remaining)
		}
	}
	r.Create = false
	if err == nil && found && !known {
		l.rows.Add(r.Name)
	}
	if err != nil {
		if k := l.d.Classify(err); ctx.Err() == nil && (k == KindBusy || k == KindDeadlock) {
			// Another client is writing the row right now.
			return nil, l.notAcquired()
		}
		// The attempt may have been granted on the server, its reply lost
		// (a cancelled context closes the connection mid-script): free
		// what it may hold.
		l.abortVersion(ctx, r)
		return nil, ctxErr(ctx, l.errorf("acquire %q: %w", req.Name, err))
	}
	if !found || token == nil {
		e := &driver.NotAcquiredError{}
		if remaining != nil && *remaining > 0 {
			e.RetryAfter = FromMicros(*remaining)
		}
		return nil, fmt.Errorf("%s: %w", l.d.Backend(), e)
	}
	r.Token = *token
	return &versionLease{l: l, r: r}, nil
}

// newNonce returns an attempt's nonce (Req.Nonce): positive, random.
func newNonce() int64 { return rand.Int64N(math.MaxInt64) + 1 }

// abortVersion frees the lease that attempt r may have been granted,
// with a fresh bounded context (ctx may be cancelled): at once, and once
// more a moment later in the background, in case the server ran the
// attempt after the first clean-up (a script sent before the cancel is
// still read by the server).
func (l *Locker) abortVersion(ctx context.Context, r Req) {
	abort := func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		var ignored any
		_, _ = l.pool.Run(cctx, l.d.VersionAbort(l.t, r), &ignored)
	}
	abort()
	l.goCleanup(func() {
		time.Sleep(versionAbortAgain)
		abort()
	})
}

// versionAbortAgain is when abortVersion's second clean-up runs.
const versionAbortAgain = 100 * time.Millisecond

// versionLease is a grant of the Version strategy: the row's token and
// the name. Refresh and Release are conditional on both, so a stale
// holder can neither extend nor free another owner's lease.
type versionLease struct {
	l *Locker
	r Req
	// sem is set for a semaphore's slot.
	sem SemDialect
	// at is when a queued waiter's lease began at the latest (zero: at
	// the start of the request that took it; driver.Granted).
	at time.Time
	// queued: waiters were queued when the lease was granted (its
	// release hands over at once, VersionQueuer).
	queued bool
}

var _ driver.Granted = (*versionLease)(nil)

func (v *versionLease) Token() uint64         { return uint64(v.r.Token) }
func (v *versionLease) GrantedAt() time.Time  { return v.at }
func (v *versionLease) Lost() <-chan struct{} { return nil }

// Refresh moves the expiry to the server's now plus ttl, if still held:
// in a batch with the Locker's other refreshes when the dialect can
// (VersionBatcher).
func (v *versionLease) Refresh(ctx context.Context, ttl time.Duration) error {
	r := v.r
	r.TTL = ttl
	if v.sem != nil {
		return v.cond(ctx, "refresh", v.sem.SemVersionRefresh(v.l.t, r))
	}
	if f := v.l.refresher; f != nil {
		found, err := f.refresh(ctx, r, ttl)
		if err != nil {
			err = ctxErr(ctx, v.l.errorf("refresh %q: %w", v.r.Name, err))
		}
		return v.held(found, err, "refresh")
	}
	return v.cond(ctx, "refresh", v.l.d.VersionRefresh(v.l.t, r))
}

// Release frees the row if still held and wakes the waiters. With a
// VersionQueuer it hands the lease to the first queued waiter
// (VersionHandover) when the lease was granted with waiters queued;
// otherwise it tries the plain release, which frees nothing when waiters
// have queued since, and then hands over (a second round trip, on the
// first contended release only).
func (v *versionLease) Release(ctx context.Context) error {
	r := v.r
	r.Channel = v.l.t.Channel
	if v.sem != nil {
		return v.cond(ctx, "release", v.sem.SemVersionRelease(v.l.t, r))
	}
	q, queues := v.l.d.(VersionQueuer)
	if queues && v.queued {
		return v.cond(ctx, "release", q.VersionHandover(v.l.t, r))
	}
	found, err := v.run(ctx, "release", v.l.d.VersionRelease(v.l.t, r))
	if err != nil || found || !queues {
		return v.held(found, err, "release")
	}
	return v.cond(ctx, "release", q.VersionHandover(v.l.t, r))
}

func (v *versionLease) cond(ctx context.Context, op string, script []Stmt) error {
	found, err := v.run(ctx, op, script)
	return v.held(found, err, op)
}

// run runs a refresh or release script: whether it found the lease.
func (v *versionLease) run(ctx context.Context, op string, script []Stmt) (bool, error) {
	var ok bool
	found, err := v.l.pool.Run(ctx, script, &ok)
	if err != nil {
		return false, ctxErr(ctx, v.l.errorf("%s %q: %w", op, v.r.Name, err))
	}
	return found, nil
}

// held is op's outcome: err, or ErrNotHeld when it did not find the lease.
func (v *versionLease) held(found bool, err error, op string) error {
	if err != nil {
		return err
	}
	if !found {
		return v.l.errorf("%s %q: %w (expired or taken over)", op, v.r.Name, driver.ErrNotHeld)
	}
	return nil
}
