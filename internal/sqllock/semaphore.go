package sqllock

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Semaphores (driver.Request.Permits > 0) live in a table of their own
// next to the lock table (Table.Sem: the lock table's name and SemSuffix),
// so that the semaphore "x" and the lock "x" never share a row; the
// table is created by Migrate and claimed with the lock table (one table,
// one strategy, for both). A semaphore of N permits is a header row (slot
// 0), which stores N, and N slot rows (1 to N) or, for the native
// strategy, N session locks keyed by (table, name, slot) in a key space
// apart from the locks'. A permit is one slot:
//
//   - ForUpdate: a slot row locked FOR UPDATE SKIP LOCKED in a transaction
//     kept open on a pinned connection, the header row locked FOR SHARE in
//     it. Crash frees it with the connection.
//   - Native: one of N session locks taken with the try variant, while the
//     session holds the header's key shared (PostgreSQL), or under the
//     header's key held just for the attempt (MySQL's GET_LOCK has no
//     shared mode). Crash frees it with the connection.
//   - Version: a slot row with owner, token and an expiry set by the
//     server's clock, taken when free or expired.
//
// The server cannot queue "any of N": on a Notifier pool (PostgreSQL)
// the release of a permit notifies the table's channel with SemWakeKey,
// which wakes the semaphore's waiters (driver.WaitNotify; a permit freed
// by a crash notifies nobody, and the waiters' fallback timer finds it);
// elsewhere the waiters poll (driver.WaitPoll).
//
// N is stored in the header. An attempt whose N differs from the stored
// one runs the dialect's SemResize, which sets the header to its N only
// when no permit is held (pinned: no session holds the header shared; version:
// no slot's lease is in force), and then tries once more: if the header
// still says otherwise, a permit is held and the attempt fails with
// ErrInvalidOption, having changed nothing. Slots beyond the stored N are
// never taken. Tokens come from the strategy's counter (the lock table's
// sequence or AUTO_INCREMENT counter) or, when the strategy's lock tokens
// are a row's fence, from the header's fence: they strictly increase
// across all the permits of a name.
type SemDialect interface {
	// SemMaxPermits is the most permits a semaphore of strategy s may
	// have (0: the strategy has no semaphores).
	SemMaxPermits(s Strategy) int
	// SemLock takes one free slot of r.Name's semaphore of r.Permits
	// permits for a pinned strategy, on the pinned connection, when the
	// stored N is r.Permits. One row: the token (NULL: not granted; 0:
	// ForUpdate's marker is missing, Recover, as Lock), the stored N
	// (NULL: no header yet) and the slot taken (NULL: none). A slot busy
	// for a moment (a concurrent SemResize) may fail with a KindBusy
	// error. Abort (with r.Permits set) undoes it, as for Lock; Ping and
	// Unlock see r.Permits and r.Slot, and Unlock notifies r.Channel with
	// SemWakeKey(r.Name) when the pool is a Notifier.
	SemLock(s Strategy, t Table, r Req) []Stmt
	// SemResize creates r.Name's header and slot rows when missing and
	// sets the stored N to r.Permits, unless a permit is held: then it
	// changes nothing, and may fail with a KindBusy error. It is run on
	// a pool connection and must leave it as it found it.
	SemResize(s Strategy, t Table, r Req) []Stmt
	// SemVersionAcquire takes a free or expired slot for the Version
	// strategy (storing r.Nonce in it) when the stored N is r.Permits.
	// One row: the token (NULL: not granted), the stored N (NULL: no
	// header yet), and the microseconds until the first slot's lease ends
	// (NULL: unknown).
	SemVersionAcquire(t Table, r Req) []Stmt
	// SemVersionRefresh, SemVersionRelease and SemVersionAbort are
	// VersionRefresh, VersionRelease and VersionAbort for a slot, found
	// by its token (unique across the name's slots) or the attempt's
	// nonce. SemVersionRelease notifies r.Channel with SemWakeKey(r.Name)
	// when the pool is a Notifier.
	SemVersionRefresh(t Table, r Req) []Stmt
	SemVersionRelease(t Table, r Req) []Stmt
	SemVersionAbort(t Table, r Req) []Stmt
}

// SemSuffix is appended to the lock table's name to name its semaphore
// table; it is no longer than SeqSuffix.
const SemSuffix = "_sem"

// MaxPermits is the most permits the SQL strategies give a semaphore: each
// permit is a row (or a key tried in turn by an attempt), and the tests
// run semaphores of this size.
const MaxPermits = 1000

// semWakePrefix starts a semaphore's wake-up key on the table's channel
// (SemWakeKey). A lock named so only gets a spurious wake-up.
const semWakePrefix = "\x1fsemaphore\x1f"

// SemWakeKey is the payload that a release of a permit of name notifies.
func SemWakeKey(name string) string { return semWakePrefix + name }

// semDialect returns the dialect's semaphore SQL, or nil.
func (l *Locker) semDialect() SemDialect {
	sd, _ := l.d.(SemDialect)
	return sd
}

// acquireSem makes one attempt at a permit of the semaphore req.Name.
func (l *Locker) acquireSem(ctx context.Context, req driver.Request) (driver.Lease, error) {
	sd := l.semDialect()
	if sd == nil || l.caps.MaxPermits == 0 {
		return nil, fmt.Errorf("%s: semaphores: %w", l.d.Backend(), driver.ErrUnsupported)
	}
	if req.Permits < 1 || req.Permits > l.caps.MaxPermits {
		return nil, fmt.Errorf("%s: semaphore %q: %d permits (1 to %d): %w", l.d.Backend(), req.Name, req.Permits, l.caps.MaxPermits, driver.ErrInvalidOption)
	}
	if err := l.ensure(ctx); err != nil {
		return nil, ctxErr(ctx, err)
	}
	// A SemResize may be chosen as a deadlock victim (two clients
	// creating one semaphore's header at once): the next attempt then
	// finds the other's header, or resizes again, a few times at most.
	for resized, tries := false, 0; ; tries++ {
		var (
			lease  driver.Lease
			stored int
			err    error
		)
		if l.strategy == Version {
			lease, stored, err = l.trySemVersion(ctx, sd, req)
		} else {
			lease, stored, err = l.trySemPinned(ctx, sd, req)
		}
		if err != nil || lease != nil {
			return lease, err
		}
		if stored == req.Permits {
			return nil, l.notAcquired()
		}
		if resized || tries == 3 {
			return nil, l.semMismatch(req, stored)
		}
		r := Req{Name: req.Name, Permits: req.Permits}
		if _, err := l.pool.Run(ctx, sd.SemResize(l.strategy, l.t, r)); err != nil {
			switch k := l.d.Classify(err); {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case k == KindBusy:
				return nil, l.semMismatch(req, stored)
			case k == KindDeadlock:
				continue
			}
			return nil, l.errorf("semaphore %q: storing %d permits: %w", req.Name, req.Permits, err)
		}
		resized = true
	}
}

// semMismatch is the error of an attempt whose N differs from the one
// stored while a permit is held.
func (l *Locker) semMismatch(req driver.Request, stored int) error {
	if stored == 0 {
		return l.errorf("semaphore %q: its permits are being changed by another client: %w", req.Name, driver.ErrNotAcquired)
	}
	return l.errorf("semaphore %q has %d permits while in use, not %d: %w", req.Name, stored, req.Permits, driver.ErrInvalidOption)
}

// trySemPinned makes one attempt at a slot of a pinned strategy. It
// returns the lease, or (nil, the stored N, nil) when not granted: N is
// req.Permits when the slots are all taken (or busy for a moment).
func (l *Locker) trySemPinned(ctx context.Context, sd SemDialect, req driver.Request) (driver.Lease, int, error) {
	c, err := l.pool.Pin(ctx)
	if err != nil {
		return nil, 0, ctxErr(ctx, l.errorf("taking a connection: %w", err))
	}
	r := Req{Name: req.Name, TTL: req.TTL, NoWait: true, Permits: req.Permits, Channel: l.t.Channel}
	for recovered := false; ; {
		start := time.Now()
		var token, stored, slot *int64
		found, err := c.Run(ctx, sd.SemLock(l.strategy, l.t, r), &token, &stored, &slot)
		if err == nil && found && token != nil && *token == 0 && l.strategy == ForUpdate {
			// The server lost its marker: move the counter on first.
			if recovered {
				l.abort(ctx, c, r, KindBroken)
				return nil, 0, l.errorf("acquire semaphore %q: the server's marker is still missing after recovery", req.Name)
			}
			if err := l.recover(ctx, c, r); err != nil {
				return nil, 0, ctxErr(ctx, err)
			}
			recovered = true
			continue
		}
		if err == nil && found && token != nil && slot != nil {
			r.Slot = int(*slot)
			lease, err := l.grant(ctx, c, r, *token, start)
			return lease, 0, err
		}
		kind := KindOther
		if err != nil {
			kind = l.d.Classify(err)
			if ctx.Err() != nil || isCtx(err) {
				kind = KindBroken
			}
		}
		r.Missed = err == nil
		if !l.abort(ctx, c, r, kind) {
			return nil, 0, ctxErr(ctx, l.errorf("acquire semaphore %q: %w", req.Name, err))
		}
		c.Release(false)
		switch {
		case err == nil && found && stored != nil:
			return nil, int(*stored), nil
		case err == nil:
			return nil, 0, nil // no header yet
		case kind == KindBusy || kind == KindDeadlock:
			return nil, req.Permits, nil
		}
		return nil, 0, l.errorf("acquire semaphore %q: %w", req.Name, err)
	}
}

// trySemVersion makes one attempt at a slot of the Version strategy, as
// trySemPinned does.
func (l *Locker) trySemVersion(ctx context.Context, sd SemDialect, req driver.Request) (driver.Lease, int, error) {
	r := Req{Name: req.Name, TTL: req.TTL, NoWait: true, Nonce: rand.Int64N(math.MaxInt64) + 1, Channel: l.t.Channel, Permits: req.Permits}
	var token, stored, remaining *int64
	found, err := l.pool.Run(ctx, sd.SemVersionAcquire(l.t, r), &token, &stored, &remaining)
	if err != nil {
		if k := l.d.Classify(err); ctx.Err() == nil && (k == KindBusy || k == KindDeadlock) {
			return nil, req.Permits, nil // the header is being changed right now
		}
		// Granted on the server, its reply lost? Free what it may hold.
		l.abortSemVersion(ctx, sd, r)
		return nil, 0, ctxErr(ctx, l.errorf("acquire semaphore %q: %w", req.Name, err))
	}
	switch {
	case found && token != nil:
		r.Token = *token
		return &versionLease{l: l, r: r, sem: sd}, 0, nil
	case !found || stored == nil:
		return nil, 0, nil
	case int(*stored) != req.Permits:
		return nil, int(*stored), nil
	}
	e := &driver.NotAcquiredError{}
	if remaining != nil && *remaining > 0 {
		e.RetryAfter = FromMicros(*remaining)
	}
	return nil, req.Permits, fmt.Errorf("%s: %w", l.d.Backend(), e)
}

// abortSemVersion is abortVersion for a slot.
func (l *Locker) abortSemVersion(ctx context.Context, sd SemDialect, r Req) {
	abort := func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		var ignored any
		_, _ = l.pool.Run(cctx, sd.SemVersionAbort(l.t, r), &ignored)
	}
	abort()
	l.goCleanup(func() {
		time.Sleep(versionAbortAgain)
		abort()
	})
}
