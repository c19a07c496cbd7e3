package sqllock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Sharer is implemented by a dialect whose native locks can share a
// session: a session holds many advisory or GET_LOCK locks, and each is
// freed on its own. The Native strategy's leases then share the
// Locker's sessions (a pool connection taken out of the pool), each
// session set up once (its idle timeout) rather than per lease; a
// blocking Acquire takes a connection of its own only while it waits in
// the server's queue, and that session is shared once granted.
type Sharer interface {
	// Dedicated reports whether r's lease needs a session of its own
	// (then Lock, Abort and Unlock serve it as before).
	Dedicated(r Req) bool
	// SharedLock is Lock on a session that other leases may share: it
	// changes no setting of the session but, when setup is true and the
	// lock is granted, the session's idle timeout (from r.TTL, saving
	// the previous value for Reset). It waits as r says (a shared session
	// only ever tries: r.NoWait; a session of its own may wait). Granted:
	// one row, the token.
	SharedLock(t Table, r Req, setup bool) []Stmt
	// SharedUnlock frees r's lock alone (never another lock of the
	// session). One row: true when it was held.
	SharedUnlock(t Table, r Req) []Stmt
	// Reset puts back what a setup changed, before the session goes back
	// to the pool.
	Reset(t Table) []Stmt
}

// session is a server session on which pinned leases hold their locks: a
// pool connection taken out of the pool. A dedicated one serves one lease
// (ForUpdate, semaphores, a Dedicated request); a shared one serves every
// Native lease of its TTL whose name it does not hold already.
type session struct {
	conn   Conn
	shared bool
	ttl    time.Duration // the TTL its idle timeout was set for (shared)

	run    sync.Mutex // serialises the connection's statements
	broken atomic.Bool

	// guarded by Locker.mu:
	names  map[string]struct{} // names held, or being tried, on it
	leases map[*pinnedLease]struct{}
	busy   int  // attempts in progress on it
	set    bool // its setup is done (Sharer.SharedLock's setup)
	// A session left without leases is kept (leave) until it has been
	// idle for idleKeep: idle fires at most once per idleKeep while the
	// session is used (retire), rather than a timer per lease.
	idle      *time.Timer
	idleArmed bool      // idle is pending
	idleSince time.Time // when it was last left without leases
	gone      bool      // left l.sessions
}

// errBroken is a statement refused on a session that has broken.
var errBroken = errors.New("the session broke")

// exec runs stmts on the session, one caller at a time.
func (s *session) exec(ctx context.Context, stmts []Stmt, dest ...any) (bool, error) {
	s.run.Lock()
	defer s.run.Unlock()
	if s.broken.Load() {
		return false, errBroken
	}
	return s.conn.Run(ctx, stmts, dest...)
}

// sharedCtx bounds a statement on a shared session. A statement
// interrupted by its context leaves the connection broken (the drivers
// close it), which would end every lease on the session: so the caller's
// cancellation is not passed on, only its deadline when keep is true,
// and the clean-up bound otherwise (the statements never wait: a try, a
// ping, an unlock).
func sharedCtx(ctx context.Context, keep bool) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && keep {
		return context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	return cleanupCtx(ctx)
}

// sharer returns the dialect's Sharer when r's lease shares sessions.
func (l *Locker) sharer(r Req) (Sharer, bool) {
	sh, ok := l.d.(Sharer)
	if !ok || l.strategy != Native || r.Permits > 0 || sh.Dedicated(r) {
		return nil, false
	}
	return sh, true
}

// maxShared is how many sessions the Locker opens for tries before it
// queues tries on the ones it has: half the pool, so that waiting
// Acquires and the pool's other users find connections.
func (l *Locker) maxShared() int {
	if n := l.pool.MaxConns(); n > 0 {
		return max(n/2, 1)
	}
	return 16
}

// keepIdle reports whether a session without leases is kept for the next
// lease (for idleKeep) rather than given back to the pool at once: not
// on a pool of one connection, whose other users it would starve.
func (l *Locker) keepIdle() bool { return l.pool.MaxConns() != 1 }

// idleKeep is how long a session without leases is kept. Well under the
// shortest idle timeout a setup sets (the TTL), so that the server never
// ends a kept session for idling.
func idleKeep(ttl time.Duration) time.Duration { return min(ttl/4, time.Second) }

// pickSession reserves name on a shared session of ttl for a try: one
// that is idle, else a new one while there are fewer than maxShared,
// else the least busy. It reports whether the session needs its setup.
func (l *Locker) pickSession(ctx context.Context, name string, ttl time.Duration) (*session, error) {
	l.mu.Lock()
	var best *session
	n := 0
	for _, s := range l.sessions {
		if s.ttl != ttl {
			continue
		}
		n++
		if _, holds := s.names[name]; holds {
			continue
		}
		if best == nil || s.busy < best.busy {
			best = s
		}
	}
	if best != nil && (best.busy == 0 || n+l.opening >= l.maxShared()) {
		l.reserve(best, name)
		l.mu.Unlock()
		return best, nil
	}
	l.opening++
	l.mu.Unlock()
	c, err := l.pool.Pin(ctx)
	l.mu.Lock()
	l.opening--
	if err != nil {
		l.mu.Unlock()
		return nil, err
	}
	s := &session{conn: c, shared: true, ttl: ttl, names: map[string]struct{}{}, leases: map[*pinnedLease]struct{}{}}
	l.sessions = append(l.sessions, s)
	l.reserve(s, name)
	l.mu.Unlock()
	return s, nil
}

// try runs sh.SharedLock of r on s, with the session's setup when it has
// none yet (decided under s.run: statements on s run one at a time).
func (l *Locker) try(ctx context.Context, sh Sharer, s *session, r Req, token *int64) (bool, error) {
	s.run.Lock()
	defer s.run.Unlock()
	if s.broken.Load() {
		return false, errBroken
	}
	l.mu.Lock()
	setup := !s.set
	l.mu.Unlock()
	found, err := s.conn.Run(ctx, sh.SharedLock(l.t, r, setup), token)
	if err == nil && found && setup {
		l.mu.Lock()
		s.set = true
		l.mu.Unlock()
	}
	return found, err
}

// reserve marks name as held or tried on s (l.mu held).
func (l *Locker) reserve(s *session, name string) {
	s.names[name] = struct{}{}
	s.busy++
}

// leave ends an attempt, or a lease, of name on s: a shared session left
// without leases is kept a moment for the next (keepIdle) or given back
// to the pool; a dedicated one is given back.
func (l *Locker) leave(s *session, name string, attempt bool) {
	l.mu.Lock()
	delete(s.names, name)
	if attempt {
		s.busy--
	}
	if s.gone || len(s.names) > 0 || s.busy > 0 {
		l.mu.Unlock()
		return
	}
	if s.shared && l.keepIdle() && !l.closing && !l.keeps(s) {
		s.idleSince = time.Now()
		if !s.idleArmed {
			s.idleArmed = true
			if s.idle == nil {
				s.idle = time.AfterFunc(idleKeep(s.ttl), func() { l.retire(s) })
			} else {
				s.idle.Reset(idleKeep(s.ttl))
			}
		}
		l.mu.Unlock()
		return
	}
	// Another is kept already: this one goes back to the pool now (a
	// session shared after a wait would otherwise hold a connection for
	// idleKeep after every contended grant), its reset off the caller's
	// path.
	l.unlist(s)
	l.mu.Unlock()
	l.goCleanup(func() { l.giveBack(s) })
}

// keeps reports whether a session of s's TTL other than s is kept
// without leases (l.mu held).
func (l *Locker) keeps(s *session) bool {
	for _, o := range l.sessions {
		if o != s && o.ttl == s.ttl && len(o.names) == 0 && o.busy == 0 {
			return true
		}
	}
	return false
}

// retire gives back a session kept without leases for idleKeep; one in
// use again is left alone (leave arms idle again), one used meanwhile
// is looked at again when idleKeep has passed since.
func (l *Locker) retire(s *session) {
	l.mu.Lock()
	s.idleArmed = false
	if s.gone || len(s.names) > 0 || s.busy > 0 {
		l.mu.Unlock()
		return
	}
	if rest := idleKeep(s.ttl) - time.Since(s.idleSince); rest > 0 {
		s.idleArmed = true
		s.idle.Reset(rest)
		l.mu.Unlock()
		return
	}
	l.unlist(s)
	l.mu.Unlock()
	l.giveBack(s)
}

// unlist removes s from l.sessions (l.mu held).
func (l *Locker) unlist(s *session) {
	s.gone = true
	if s.idle != nil {
		s.idle.Stop()
		s.idleArmed = false
	}
	for i, o := range l.sessions {
		if o == s {
			l.sessions = append(l.sessions[:i], l.sessions[i+1:]...)
			break
		}
	}
}

// giveBack returns an unlisted session without locks to the pool, its
// setup undone first; a session whose reset fails is discarded.
func (l *Locker) giveBack(s *session) {
	l.mu.Lock()
	set := s.set
	l.mu.Unlock()
	s.run.Lock()
	defer s.run.Unlock()
	if s.broken.Load() {
		return // breakSession releases it
	}
	discard := false
	if sh, ok := l.d.(Sharer); ok && set {
		ctx, cancel := cleanupCtx(context.Background())
		var ignored any
		_, err := s.conn.Run(ctx, sh.Reset(l.t), &ignored)
		cancel()
		discard = err != nil
	}
	s.conn.Release(discard)
}

// breakSession ends a session whose state is lost or unknown: the server
// drops it (and with it every lock it holds), and every lease on it is
// lost, each told at once. A lease that breaks its session calls it with
// its own lock held, having ended itself.
func (l *Locker) breakSession(ctx context.Context, s *session) {
	if s.broken.Swap(true) {
		return
	}
	l.mu.Lock()
	l.unlist(s)
	others := make([]*pinnedLease, 0, len(s.leases))
	for p := range s.leases {
		others = append(others, p)
	}
	l.mu.Unlock()
	l.goCleanup(func() {
		for _, p := range others {
			p.lose(ctx) // ends it (if not yet): Lost closes
		}
	})
	l.goCleanup(func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		s.run.Lock() // no statement of another lease runs meanwhile
		defer s.run.Unlock()
		s.conn.Abandon(cctx)
		s.conn.Release(true)
	})
}

// acquireShared is a Native Acquire or TryAcquire that shares sessions.
// A TryAcquire tries once on a shared session. An Acquire waits in the
// server's queue on a session of its own (a statement that waits holds
// its session), shared once granted: one kept without leases when the
// Locker has one (no try first: the waiting statement takes a free lock
// at once), else, after one try on a shared session found the lock held,
// that session when the try left it without other users, else a new one.
func (l *Locker) acquireShared(ctx context.Context, sh Sharer, req Req, wait bool) (*pinnedLease, error) {
	r := req
	r.NoWait = true
	if wait {
		if s := l.claimIdle(r.Name, r.TTL); s != nil {
			p, err := l.waitOn(ctx, sh, s, req, true)
			if !errors.Is(err, errKeptBroken) {
				return p, err
			}
			// The server ended the kept session: go on as without one.
		}
	}
	for retried := false; ; retried = true {
		s, err := l.pickSession(ctx, r.Name, r.TTL)
		if err != nil {
			return nil, l.poolErr(ctx, err)
		}
		sctx, cancel := sharedCtx(ctx, false)
		start := time.Now()
		var token int64
		found, err := l.try(sctx, sh, s, r, &token)
		cancel()
		if err == nil && found {
			return l.joinShared(s, r, token, start), nil
		}
		if err != nil {
			l.mu.Lock()
			idle := len(s.leases) == 0
			l.mu.Unlock()
			ferr := l.failTry(ctx, sh, s, r, err)
			if idle && !retried && ctx.Err() == nil && (l.d.Classify(err) == KindBroken || errors.Is(err, errBroken)) {
				continue // a kept session the server ended: try a fresh one
			}
			return nil, ferr
		}
		if !wait {
			l.leave(s, r.Name, true)
			return nil, ctxErr(ctx, l.notAcquired())
		}
		if !l.claim(s) {
			l.leave(s, r.Name, true)
			c, err := l.pool.Pin(ctx)
			if err != nil {
				return nil, l.poolErr(ctx, err)
			}
			s = &session{conn: c, shared: true, ttl: r.TTL, gone: true, busy: 1,
				names: map[string]struct{}{r.Name: {}}, leases: map[*pinnedLease]struct{}{}}
		}
		return l.waitOn(ctx, sh, s, req, false)
	}
}

// errKeptBroken: waitOn found its kept session ended before it could
// wait on it.
var errKeptBroken = errors.New("the kept session had ended")

// failTry cleans up after a statement that failed on the shared session
// s: a broken session is ended (with every lease on it); otherwise the
// lock may have been granted before the error, and is freed (alone), or
// the session broken when that fails. It ends the attempt on s.
func (l *Locker) failTry(ctx context.Context, sh Sharer, s *session, r Req, err error) error {
	if l.d.Classify(err) == KindBroken || errors.Is(err, errBroken) || isCtx(err) {
		l.breakSession(ctx, s)
	} else {
		uctx, cancel := sharedCtx(ctx, false)
		var ignored any
		if _, uerr := s.exec(uctx, sh.SharedUnlock(l.t, r), &ignored); uerr != nil {
			l.breakSession(ctx, s)
		}
		cancel()
	}
	l.leave(s, r.Name, true)
	return ctxErr(ctx, l.errorf("%w", err))
}

// claimIdle reserves name on a shared session of ttl that has no leases
// and no attempts, for a wait of its own (claim), or returns nil.
func (l *Locker) claimIdle(name string, ttl time.Duration) *session {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sessions {
		if s.ttl == ttl && len(s.names) == 0 && s.busy == 0 {
			l.reserve(s, name)
			l.unlist(s)
			return s
		}
	}
	return nil
}

// claim takes s, on which this attempt alone has reserved its name, out
// of the shared sessions for a wait of its own; false when s has other
// leases or attempts.
func (l *Locker) claim(s *session) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.gone || s.busy != 1 || len(s.names) != 1 || len(s.leases) > 0 {
		return false
	}
	l.unlist(s)
	return true
}

// relist puts a session claimed for a wait back among the shared ones
// (l.mu held); false when it broke meanwhile.
func (l *Locker) relist(s *session) bool {
	if s.broken.Load() || !s.gone {
		return !s.broken.Load()
	}
	s.gone = false
	l.sessions = append(l.sessions, s)
	return true
}

// waitOn waits in the server's queue for req on s, a session of this
// attempt alone (claimed, or new and unlisted), whose name it has
// reserved; the wait is bounded by ctx's deadline (the dialect's lock
// timeout) and cut short by its cancellation (the driver interrupts the
// statement: the session, which holds no lease, is then ended). A grant
// lists s among the shared sessions without a round trip; otherwise s is
// kept or given back as any session left without leases. kept: s was
// kept without leases, unused by this attempt so far; when the server has
// ended it, waitOn returns errKeptBroken.
func (l *Locker) waitOn(ctx context.Context, sh Sharer, s *session, req Req, kept bool) (*pinnedLease, error) {
	r := req
	r.NoWait = false
	for first := true; ; first = false {
		r.Wait = 0
		if dl, ok := ctx.Deadline(); ok {
			r.Wait = max(time.Until(dl), time.Millisecond)
		}
		start := time.Now()
		var token int64
		found, err := l.try(ctx, sh, s, r, &token)
		if ctx.Err() != nil {
			// ctx ended during the statement: a driver may be closing the
			// connection right now (go-sql-driver does when ctx ends as
			// a query finishes), so s is never shared again. Ending it
			// frees a lock it may have been granted.
			l.breakSession(ctx, s) // it holds no lease
			return nil, ctx.Err()
		}
		if err == nil && found {
			l.mu.Lock()
			l.relist(s)
			l.mu.Unlock()
			p := l.joinShared(s, r, token, start)
			if err := l.settle(ctx, p, start); err != nil {
				return nil, err
			}
			return p, nil
		}
		kind := KindOther
		if err != nil {
			kind = l.d.Classify(err)
			if isCtx(err) {
				kind = KindBroken
			}
		}
		switch {
		case err == nil || kind == KindBusy:
			// The server's wait ended: at ctx's deadline, or early (its
			// timeout is rounded): wait again.
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < rewaitMin {
				l.mu.Lock()
				l.relist(s)
				l.mu.Unlock()
				l.leave(s, r.Name, true)
				<-ctx.Done()
				return nil, ctx.Err()
			}
		case kind == KindDeadlock:
			// A deadlock victim: try again.
		case kind == KindBroken:
			l.breakSession(ctx, s) // it holds no lease
			if kept && first && ctx.Err() == nil {
				return nil, errKeptBroken
			}
			return nil, ctxErr(ctx, l.errorf("%w", err))
		default:
			l.mu.Lock()
			l.relist(s) // for failTry, which frees the lock or ends s
			l.mu.Unlock()
			return nil, l.failTry(ctx, sh, s, r, err)
		}
	}
}

// joinShared makes the grant of token on the shared session s a lease.
func (l *Locker) joinShared(s *session, r Req, token int64, start time.Time) *pinnedLease {
	p := &pinnedLease{l: l, r: r, token: token, granted: start, s: s, lost: make(chan struct{})}
	p.deadline = localDeadline(start, r.TTL)
	l.mu.Lock()
	s.busy--
	s.leases[p] = struct{}{}
	l.pinned[p] = struct{}{}
	l.mu.Unlock()
	return p
}

// poolStats is a Pool that says how many of its connections are in use.
type poolStats interface{ InUse() int }

// poolErr is the error of a connection the pool did not give. When the
// wait for one ended the attempt and every connection of the pool is in
// use (a blocking Acquire needs one of its own while it waits; a
// dedicated lease holds one), it says so, wrapping
// driver.ErrPoolExhausted and the context's error, and the portable
// layer passes it on; a context that ended otherwise gives its error.
func (l *Locker) poolErr(ctx context.Context, err error) error {
	if ctx.Err() == nil && !isCtx(err) {
		return l.errorf("taking a connection: %w", err)
	}
	size := l.pool.MaxConns()
	ps, ok := l.pool.(poolStats)
	if !ok || size <= 0 || ps.InUse() < size {
		return ctxOr(ctx, err)
	}
	return l.errorf("%w (a pool of %d): %w", driver.ErrPoolExhausted, size, ctxOr(ctx, err))
}

// ctxOr returns ctx's error when it has ended, else err.
func ctxOr(ctx context.Context, err error) error {
	if e := ctx.Err(); e != nil {
		return e
	}
	return err
}
