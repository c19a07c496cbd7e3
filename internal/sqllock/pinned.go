package sqllock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// acquirePinned takes the lock of a pinned strategy (ForUpdate, Native) on
// a connection taken from the pool, which the lease keeps until it ends.
// With wait, the server's lock queue is the wait, bounded by ctx's
// deadline (the dialect turns it into lock_timeout, innodb_lock_wait_timeout
// or GET_LOCK's timeout) and cut short by ctx's cancellation (the driver
// interrupts the statement; the connection is then abandoned).
//
// Each turn of the loop runs the dialect's Lock once; a grant becomes a
// lease (grant), anything else is classified (nextStep) into what to do
// next, and a missing row is created (createRow) before the next turn.
func (l *Locker) acquirePinned(ctx context.Context, req driver.Request, wait bool) (driver.Lease, error) {
	if err := l.ensure(ctx); err != nil {
		return nil, ctxErr(ctx, err)
	}
	r := Req{Name: req.Name, Owner: req.Owner, TTL: req.TTL, NoWait: !wait}
	if sh, ok := l.sharer(r); ok {
		p, err := l.acquireShared(ctx, sh, r, wait)
		if err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			// Granted, but ctx ended meanwhile: give it back.
			cctx, cancel := cleanupCtx(ctx)
			_ = p.Release(cctx)
			cancel()
			return nil, ctx.Err()
		}
		p.arm()
		return p, nil
	}
	c, err := l.pool.Pin(ctx)
	if err != nil {
		return nil, l.poolErr(ctx, err)
	}
	_, creates := l.d.(RowCreator)
	creates = creates && l.strategy == ForUpdate
	known := !creates || l.rows.Has(r.Name)
	r.Create = !known
	for created, recovered := false, false; ; {
		if wait {
			r.Wait = 0
			if dl, ok := ctx.Deadline(); ok {
				r.Wait = max(time.Until(dl), time.Millisecond)
			}
		}
		start := time.Now()
		var token int64
		found, err := c.Run(ctx, l.d.Lock(l.strategy, l.t, r), &token)
		created = created || r.Create && err == nil
		r.Create = false
		if err == nil && found && !known {
			l.rows.Add(r.Name)
			known = true
		}
		if err == nil && found && token == 0 && l.strategy == ForUpdate {
			// The server lost its marker (a crash, a failover): no token
			// was taken. Move the counter on, then try again.
			if recovered {
				c.Release(false)
				return nil, l.errorf("acquire %q: the server's marker is still missing after recovery", req.Name)
			}
			if err := l.recover(ctx, c, r); err != nil {
				return nil, ctxErr(ctx, err)
			}
			recovered = true
			continue
		}
		if err == nil && found {
			return l.grant(ctx, c, r, token, start)
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
			if err == nil {
				err = errUndo
			}
			return nil, ctxErr(ctx, l.errorf("%w", err))
		}
		r.Missed = false
		switch l.nextStep(err, kind, wait, created) {
		case stepCreateRow:
			if creates {
				// The next Lock creates the row.
				r.Create = true
				continue
			}
			busy, err := l.createRow(ctx, c, r)
			if err != nil {
				return nil, ctxErr(ctx, err)
			}
			if busy && !wait {
				c.Release(false)
				return nil, l.notAcquired()
			}
			created = !busy // busy: the row may exist now, or not yet
		case stepNotAcquired:
			c.Release(false)
			return nil, l.notAcquired()
		case stepWaitEnded:
			if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(dl) < rewaitMin {
				c.Release(false)
				<-ctx.Done()
				return nil, ctx.Err()
			}
			// Woken early (the server's timeout is rounded): wait again.
		case stepRetry:
			// A deadlock victim: try again.
		case stepFail:
			c.Release(false)
			return nil, l.errorf("%w", err)
		}
	}
}

// errUndo: an attempt that was not granted could not be undone on its
// connection (which has been dropped).
var errUndo = errors.New("the connection failed while the attempt was undone")

// step is what acquirePinned does after a Lock that did not grant.
type step int

const (
	// stepCreateRow: ForUpdate found no row for the name: create it, try
	// again.
	stepCreateRow step = iota
	// stepNotAcquired: held by another, and the caller does not wait.
	stepNotAcquired
	// stepWaitEnded: the server's wait ended (at ctx's deadline, or early:
	// its timeout is rounded).
	stepWaitEnded
	// stepRetry: the server chose this attempt as a deadlock victim.
	stepRetry
	// stepFail: any other error.
	stepFail
)

// nextStep classifies the outcome of a Lock that did not grant: err is
// Run's error (nil when Lock returned no row) and kind its class; created
// reports whether this attempt has created the name's row.
func (l *Locker) nextStep(err error, kind Kind, wait, created bool) step {
	switch {
	case err == nil && l.strategy == ForUpdate && !created:
		return stepCreateRow
	case !wait && (err == nil || kind == KindBusy || kind == KindDeadlock):
		return stepNotAcquired
	case err == nil, kind == KindBusy:
		return stepWaitEnded
	case kind == KindDeadlock:
		return stepRetry
	}
	return stepFail
}

// createRow inserts the name's row on c, committed at once so that it
// never waits for another creator's transaction. busy means that another
// client created the row and holds it (or, on MySQL, a gap lock of a
// concurrent attempt blocked the insert): the row may exist now. On an
// error c has been abandoned and released.
func (l *Locker) createRow(ctx context.Context, c Conn, r Req) (busy bool, err error) {
	_, err = c.Run(ctx, l.d.EnsureRow(l.t, r))
	if err == nil {
		return false, nil
	}
	kind := l.d.Classify(err)
	if ctx.Err() != nil || (kind != KindBusy && kind != KindDeadlock) {
		kind = KindBroken
	}
	if !l.abort(ctx, c, r, kind) {
		return false, l.errorf("creating the row of %q: %w", r.Name, err)
	}
	return true, nil
}

// recover rolls back an attempt that found the server's marker missing
// and runs the dialect's Recover on c. On an error c has been
// abandoned and released.
func (l *Locker) recover(ctx context.Context, c Conn, r Req) error {
	if !l.abort(ctx, c, r, KindOther) {
		return l.errorf("acquire %q: rolling back before recovery failed", r.Name)
	}
	l.recoverMu.Lock()
	defer l.recoverMu.Unlock()
	var ignored any
	if _, err := c.Run(ctx, l.d.Recover(l.t), &ignored); err != nil {
		l.abort(ctx, c, r, KindBroken)
		return l.errorf("acquire %q: moving the token counter on after a crash of the server: %w", r.Name, err)
	}
	return nil
}

// notAcquired is the error of a lock held by someone else.
func (l *Locker) notAcquired() error {
	return fmt.Errorf("%s: %w", l.d.Backend(), driver.ErrNotAcquired)
}

// grant turns the grant of token on c into a lease: it gives the grant
// back when ctx ended meanwhile, and after a long wait restarts the
// server's idle timer (settle).
func (l *Locker) grant(ctx context.Context, c Conn, r Req, token int64, start time.Time) (driver.Lease, error) {
	if ctx.Err() != nil {
		// Granted, but ctx ended meanwhile: a driver may be closing the
		// connection right now (go-sql-driver does when ctx ends as a
		// query finishes). Give the grant back; the caller sees ctx's
		// error, as it would a moment later.
		l.abort(ctx, c, r, KindBroken)
		return nil, ctx.Err()
	}
	p := l.newPinned(c, r, token, start)
	if err := l.settle(ctx, p, start); err != nil {
		return nil, err
	}
	p.arm()
	return p, nil
}

// settle ends the grant of p, requested at start: after a long wait the
// server's idle timer started at the grant, somewhere in the call, so it
// is restarted now (a ping), for the lease's deadline to count from a
// known moment. On an error p has ended.
func (l *Locker) settle(ctx context.Context, p *pinnedLease, start time.Time) error {
	took := time.Since(start)
	if took <= p.r.TTL/4 {
		return nil
	}
	lost, err := p.ping(ctx, p.r.TTL)
	if lost == nil && err == nil {
		p.mu.Lock()
		p.granted = p.lastPing
		p.mu.Unlock()
		return nil
	}
	if lost != nil && ctx.Err() == nil {
		// Not a refresh the caller asked for: say what happened to the
		// grant.
		return l.errorf("acquire %q: granted, but the lease of TTL %v ended on the server before it could be returned (the grant took %v): %w: %w",
			p.r.Name, p.r.TTL, took.Round(time.Microsecond), driver.ErrLockLost, lost)
	}
	if lost == nil {
		// Not pinged (ctx ended first): give the grant back.
		cctx, cancel := cleanupCtx(ctx)
		_ = p.Release(cctx)
		cancel()
	}
	return ctxErr(ctx, err)
}

// abort cleans up after a Lock that did not grant: on a usable
// connection it runs the dialect's Abort script; otherwise (or when that
// fails) it abandons and discards the connection. It reports whether the
// connection is still usable (the caller then owns it).
func (l *Locker) abort(ctx context.Context, c Conn, r Req, kind Kind) bool {
	cctx, cancel := cleanupCtx(ctx)
	defer cancel()
	if kind != KindBroken {
		script := l.d.Abort(l.strategy, l.t, r)
		if len(script) == 0 {
			return true
		}
		if _, err := c.Run(cctx, script); err == nil {
			return true
		}
	}
	c.Abandon(cctx)
	c.Release(true)
	return false
}

// pinnedLease is a grant that lives on a pinned connection.
type pinnedLease struct {
	l     *Locker
	r     Req
	token int64

	mu       sync.Mutex // serialises the lease's statements
	granted  time.Time
	s        *session
	ended    bool
	lastPing time.Time
	lost     chan struct{}
	onLost   func() // OnLost's callback, until the lease ends
	// deadline is the lease's local deadline, computed as the portable
	// layer does (the start of the last grant or ping, plus the TTL, minus
	// driver.Drift); expiry fires at it.
	deadline time.Time
	expiry   *time.Timer
}

func (l *Locker) newPinned(c Conn, r Req, token int64, start time.Time) *pinnedLease {
	p := &pinnedLease{l: l, r: r, token: token, granted: start, s: &session{conn: c}, lost: make(chan struct{})}
	p.deadline = localDeadline(start, r.TTL)
	l.mu.Lock()
	l.pinned[p] = struct{}{}
	l.mu.Unlock()
	return p
}

// arm starts the expiry timer (once the grant's deadline is known).
func (p *pinnedLease) arm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		p.expiry = time.AfterFunc(time.Until(p.deadline), p.expire)
	}
}

// localDeadline is the deadline of a lease of ttl whose request started
// at start: the portable layer's, so that the driver ends the hold on the
// server when the holder's Done closes.
func localDeadline(start time.Time, ttl time.Duration) time.Time {
	return start.Add(ttl - driver.Drift(ttl))
}

// expire ends the hold at the lease's local deadline. The server would
// end it too, at its idle timeout, but that counts whole seconds on MySQL
// and starts later than the lease: a lease that has ended for its holder
// must not keep the lock from everyone else. Closing the connection makes
// the server roll back (ForUpdate) or unlock (Native) at once.
func (p *pinnedLease) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	if d := time.Until(p.deadline); d > 0 { // refreshed meanwhile
		p.expiry.Reset(d)
		return
	}
	p.loseLocked(context.Background(), false)
}

// Token returns the grant's token.
func (p *pinnedLease) Token() uint64 { return uint64(p.token) }

// GrantedAt is a local time at or before the start of the server's idle
// timer of the pinned connection (the moment the lease's TTL starts).
func (p *pinnedLease) GrantedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.granted
}

// Lost is closed when the pinned connection breaks.
func (p *pinnedLease) Lost() <-chan struct{} { return p.lost }

var _ driver.LossNotifier = (*pinnedLease)(nil)

// OnLost calls f in a goroutine of its own when the lease is lost, never
// once it is released (driver.LossNotifier): the portable layer then
// starts no goroutine per grant to wait on Lost.
func (p *pinnedLease) OnLost(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		p.onLost = f // loseLocked calls it
		return
	}
	select {
	case <-p.lost: // ended by its loss
		go f()
	default: // released
	}
}

// Session is the server's id of the pinned connection.
func (p *pinnedLease) Session() int64 { return p.s.conn.Session() }

// Refresh pings the pinned connection, which restarts the server's idle
// timer (idle_in_transaction_session_timeout, wait_timeout) and proves
// that the connection, and with it the lock, is alive. Any failure on the
// connection ends the lease: a broken connection is a lost lock.
func (p *pinnedLease) Refresh(ctx context.Context, ttl time.Duration) error {
	lost, err := p.ping(ctx, ttl)
	if lost != nil {
		return fmt.Errorf("%s: refresh: %w: connection lost: %w", p.l.d.Backend(), driver.ErrNotHeld, lost)
	}
	return err
}

// ping restarts the server's idle timer. lost is why the lease has just
// ended (it has then been abandoned); err is any other failure.
func (p *pinnedLease) ping(ctx context.Context, ttl time.Duration) (lost, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil, fmt.Errorf("%s: refresh: %w", p.l.d.Backend(), driver.ErrNotHeld)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	var held bool
	found, err := p.exec(ctx, p.l.d.Ping(p.l.strategy, p.l.t, p.r), &held)
	if err == nil && found && held {
		p.lastPing = start
		if nd := localDeadline(start, ttl); nd.After(p.deadline) {
			p.deadline = nd
			if p.expiry != nil {
				p.expiry.Reset(time.Until(nd))
			}
		}
		return nil, nil
	}
	p.loseLocked(ctx, err != nil)
	if err == nil {
		err = errors.New("the server no longer holds the lock")
	}
	return err, nil
}

// exec runs stmts on the lease's session: on a shared one, not cut short
// by ctx's cancellation, which would break the session of other leases
// (sharedCtx).
func (p *pinnedLease) exec(ctx context.Context, stmts []Stmt, dest ...any) (bool, error) {
	if !p.s.shared {
		return p.s.exec(ctx, stmts, dest...)
	}
	sctx, cancel := sharedCtx(ctx, true)
	defer cancel()
	return p.s.exec(sctx, stmts, dest...)
}

// unlock is the lease's release script: on a shared session, its own
// lock alone.
func (p *pinnedLease) unlock() []Stmt {
	if p.s.shared {
		return p.l.d.(Sharer).SharedUnlock(p.l.t, p.r)
	}
	return p.l.d.Unlock(p.l.strategy, p.l.t, p.r)
}

// Release rolls back (ForUpdate) or unlocks (Native) and returns the
// connection to the pool (a shared session: once it holds nothing).
func (p *pinnedLease) Release(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return fmt.Errorf("%s: release: %w (the connection was lost)", p.l.d.Backend(), driver.ErrNotHeld)
	}
	held := true
	found, err := p.exec(ctx, p.unlock(), &held)
	if err != nil {
		p.loseLocked(ctx, true)
		if isCtx(err) {
			return err
		}
		return fmt.Errorf("%s: release: %w: %w", p.l.d.Backend(), driver.ErrNotHeld, err)
	}
	p.end(false)
	if found && !held {
		return fmt.Errorf("%s: release: %w", p.l.d.Backend(), driver.ErrNotHeld)
	}
	return nil
}

// lose ends the lease after a failure of its session: the server drops
// the session, and with it the lock; Lost is closed.
func (p *pinnedLease) lose(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		p.loseLocked(ctx, true)
	}
}

// loseLocked ends the lease: the loss is signalled at once. A session
// that broke (broken), or one of this lease alone, is abandoned in the
// background: abandoning may wait up to the clean-up bound (MySQL KILLs
// the session from a pooled connection, which may be cut off too), and
// the caller (the keep-alive) must see the loss now, before the server
// can give the lock to another client. A shared session that lives on
// (the lease's deadline passed) frees this lease's lock alone. Close
// waits for these clean-ups.
func (p *pinnedLease) loseLocked(ctx context.Context, broken bool) {
	close(p.lost)
	p.ended = true
	if f := p.onLost; f != nil {
		p.onLost = nil
		go f()
	}
	if p.expiry != nil {
		p.expiry.Stop()
	}
	p.l.forget(p)
	s, l := p.s, p.l
	if s.shared && broken {
		l.breakSession(ctx, s)
		return
	}
	if s.shared {
		r := p.r
		l.goCleanup(func() {
			cctx, cancel := cleanupCtx(ctx)
			defer cancel()
			var ignored any
			if _, err := s.exec(cctx, l.d.(Sharer).SharedUnlock(l.t, r), &ignored); err != nil {
				l.breakSession(ctx, s)
			}
			l.leave(s, r.Name, false)
		})
		return
	}
	s.broken.Store(true)
	l.goCleanup(func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		s.conn.Abandon(cctx)
		s.conn.Release(true)
	})
}

func (p *pinnedLease) end(discard bool) {
	p.ended = true
	p.onLost = nil
	if p.expiry != nil {
		p.expiry.Stop()
	}
	p.l.forget(p)
	if p.s.shared {
		p.l.leave(p.s, p.r.Name, false)
		return
	}
	p.s.conn.Release(discard)
}

// forget drops p from the live leases.
func (l *Locker) forget(p *pinnedLease) {
	l.mu.Lock()
	delete(l.pinned, p)
	if p.s.leases != nil {
		delete(p.s.leases, p)
	}
	l.mu.Unlock()
}
