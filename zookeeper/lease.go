package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/driver"
)

// lease is one grant: the session's ephemeral node at path.
type lease struct {
	l       *locker
	path    string // the lock node (fair: our queue node; basic: the one lock node)
	sid     int64  // the session that owns the node
	token   uint64 // czxid of the node
	at      time.Time
	basic   bool
	version int32 // basic: the parent's data version set by this grant

	lost chan struct{} // closed when the lease may be gone
	stop chan struct{} // closed by Release
	lazy *time.Timer   // sets the node's watch lazyWatch after the grant (nil: set at once)

	// pw counts the events on the node's path that reached the Locker's
	// event callback (session.onEvent) while the lease is registered (nil
	// if it never was); arm is the newest watch set on the node that
	// refreshShared may rely on (nil: none).
	pw  *pathWatch
	arm atomic.Pointer[arming]

	mu       sync.Mutex
	isLost   bool
	released bool
	why      string
	onLost   func() // called once if the lease is lost before its release (OnLost)
}

var (
	_ driver.Lease        = (*lease)(nil)
	_ driver.Granted      = (*lease)(nil)
	_ driver.LossNotifier = (*lease)(nil)
)

func (l *locker) newLease(path string, sid int64, token int64, basic bool, version int32) *lease {
	return &lease{l: l, path: path, sid: sid, token: uint64(token), at: time.Now(), basic: basic,
		version: version, lost: make(chan struct{}), stop: make(chan struct{})}
}

// lazyWatch is how long after an uncontended grant the lease's node watch
// is set; a revocation within that time is noticed when it is set.
const lazyWatch = time.Millisecond

// start registers the lease with the session monitor and watches its node
// (watch is a child watch on the parent or a data watch on the node; nil:
// set one, lazyWatch later: a lease released by then costs no watch
// request, no notification at release, and no goroutine: the timer's
// function runs only if it fires).
func (ls *lease) start(watch <-chan zk.Event) {
	ls.l.s.register(ls)
	if watch != nil {
		go ls.watch(watch)
		return
	}
	ls.lazy = time.AfterFunc(lazyWatch, func() { ls.watch(nil) })
}

func (ls *lease) Token() uint64         { return ls.token }
func (ls *lease) GrantedAt() time.Time  { return ls.at }
func (ls *lease) Lost() <-chan struct{} { return ls.lost }
func (ls *lease) String() string        { return ls.path }
func (ls *lease) orphan() orphan {
	return orphan{path: ls.path, basic: ls.basic, basicVersion: ls.version}
}
func (ls *lease) stopped() (bool, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.released, ls.isLost
}
func (ls *lease) lose(why string) { ls.l.s.loseAll(func(x *lease) bool { return x == ls }, why) }

// markLost closes Lost once; it reports whether it did (false after a
// Release).
func (ls *lease) markLost(why string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.isLost || ls.released {
		return false
	}
	ls.isLost, ls.why = true, why
	close(ls.lost)
	if f := ls.onLost; f != nil {
		ls.onLost = nil
		go f()
	}
	return true
}

// OnLost calls f in a goroutine of its own when the lease is lost (at
// once if it is), never if it was released first: the portable layer then
// needs no goroutine per lease waiting on Lost (driver.LossNotifier).
func (ls *lease) OnLost(f func()) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case ls.isLost:
		go f()
	case !ls.released:
		ls.onLost = f
	}
}

// watch ends the lease when its node is deleted (revoked by an
// administrator, or the session expired). It runs until the lease is
// released or lost.
func (ls *lease) watch(ch <-chan zk.Event) {
	for {
		if ch == nil {
			var ok bool
			if ch, ok = ls.rearm(); !ok {
				return
			}
			continue
		}
		select {
		case <-ls.stop:
			return
		case <-ls.lost:
			return
		case ev := <-ch:
			ch = nil
			switch {
			case ev.Type == zk.EventNodeDeleted && ev.Path == ls.path:
				ls.lose("zookeeper: the lock node was deleted (revoked, or its session expired)")
				return
			case ev.Type == zk.EventNotWatching:
				if errors.Is(ev.Err, zk.ErrSessionExpired) {
					ls.lose("zookeeper: session expired")
					return
				}
				if errors.Is(ev.Err, zk.ErrClosing) {
					ls.lose("zookeeper: connection closed")
					return
				}
			}
			// The parent's children changed, or a spurious event: watch the
			// node itself from now on.
		}
	}
}

// rearm sets a data watch on the node and checks it is still this grant's.
func (ls *lease) rearm() (<-chan zk.Event, bool) {
	for {
		if rel, lost := ls.stopped(); rel || lost {
			return nil, false
		}
		c, f := ls.beforeWatch()
		ctx, cancel := context.WithTimeout(context.Background(), max(ls.l.s.sessionTimeout(), time.Second))
		d, err := getW(ctx, ls.l.conn, ls.path)
		cancel()
		switch {
		case err == nil:
			if d.st.EphemeralOwner != ls.sid || (ls.basic && uint64(d.st.Czxid) != ls.token) {
				ls.lose("zookeeper: the lock node now belongs to another grant")
				return nil, false
			}
			ls.watched(c, f)
			return d.ch, true
		case errors.Is(err, zk.ErrNoNode):
			ls.lose("zookeeper: the lock node was deleted (revoked, or its session expired)")
			return nil, false
		case errors.Is(err, zk.ErrClosing):
			ls.lose("zookeeper: connection closed")
			return nil, false
		}
		// The connection is down: the session monitor decides when that
		// is a loss; try again.
		select {
		case <-ls.stop:
			return nil, false
		case <-ls.lost:
			return nil, false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// arming is a data watch on the lease's node that the server registered
// for this session: the request that set it got its reply on connection c;
// fires was the count of the node path's events (pathWatch) before the
// request was sent.
type arming struct {
	c     *trackedConn
	fires uint64
}

// beforeWatch notes, before a request that sets a watch on the node, the
// connection and the count of the node's events (nil: the Locker's
// connection is a user's, which has no tracker, or the lease was never
// registered: no refresh is local).
func (ls *lease) beforeWatch() (*trackedConn, uint64) {
	return ls.l.s.beforeWatch(ls.pw)
}

// beforeWatch is lease.beforeWatch for a path counted in pw.
func (s *session) beforeWatch(pw *pathWatch) (*trackedConn, uint64) {
	if s.tr == nil || pw == nil {
		return nil, 0
	}
	return s.tr.current(), pw.fires.Load()
}

// watched records the watch that a request begun after beforeWatch
// returned (c, f) has just set, unless the connection changed meanwhile:
// the reply may then have come on another connection than c.
func (ls *lease) watched(c *trackedConn, f uint64) {
	if c == nil || ls.pw == nil || ls.l.s.tr.current() != c {
		return
	}
	ls.arm.Store(&arming{c: c, fires: f})
}

// needsWatch reports whether a refresh's round trip should set a watch on
// the node (a getData with watch) rather than only look (exists): the node
// has no watch on the current connection that refreshShared could use.
func (ls *lease) needsWatch(c *trackedConn, f uint64) bool {
	a := ls.arm.Load()
	return c != nil && (a == nil || a.c != c || a.fires != f)
}

// armedNow returns the watch on the node that a refresh may rely on: set
// on the current connection, not fired since (no event on the node's path
// reached the Locker's event callback since before the request that set
// it was sent), in the lease's session. nil: none.
func (ls *lease) armedNow() *arming {
	tr := ls.l.s.tr
	a := ls.arm.Load()
	if tr == nil || a == nil || tr.current() != a.c || ls.pw.fires.Load() != a.fires || ls.l.conn.SessionID() != ls.sid {
		return nil
	}
	return a
}

// refreshShared reports whether a round trip shared with other refreshes
// (flights.await) shows the node still this grant's: as much as an exists
// of its own, sent after the call began, would tell. It is when
//
//	(a) a data watch on the node was set by a request R0 (which found the
//	    node this grant's) whose reply came on the current connection c,
//	    and no event on the node's path reached the Locker's event
//	    callback since before R0 was sent (armedNow), and
//	(b) a sync S sent on c after the call began has had its reply read,
//	    and (a) still holds, with the same watch.
//
// Why that is enough. A connection carries a session's requests in order,
// so the server processed S after R0, with the watch in place. Had the
// node been deleted (by an administrator, or because the session expired)
// or written before S was processed, the server would have fired the
// watch; ZooKeeper delivers a watch event to the client before the reply
// to any request it processed after the change, on the same connection (a
// client sees the event before it sees the new state), and a sync's reply
// comes after the server has applied every change the leader committed
// before it (so a revocation that completed before the call, through any
// member of an ensemble, is among them). go-zookeeper reads and handles
// one packet at a time, the event callback included, before the next, and
// returns S's reply after reading it: the event has counted in fires by
// then. A reconnection is a new connection: the watch then lives only
// through the setWatches go-zookeeper sends in the background, possibly
// after S, so (a) asks for the current connection, and the next refresh
// round trip sets a watch there. A watch that go-zookeeper drops (session
// expired, Locker closed) is reported by an EventNotWatching on the path,
// which counts in fires too.
//
// The driver contract's ttl is ignored here as in the round trip: the
// session bounds the lease, and the session monitor ends it (Lost) before
// the server could expire the session, whatever refreshes did.
//
// It returns errStopped as soon as stop closes.
func (ls *lease) refreshShared(ctx context.Context, stop <-chan struct{}) (bool, error) {
	a := ls.armedNow()
	if a == nil {
		return false, nil
	}
	if err := ls.l.flights.await(ctx, ls.l.conn, stop); err != nil {
		return false, err
	}
	return ls.armedNow() == a, nil
}

// Refresh verifies that the node still exists and belongs to this lease's
// session, which the server keeps alive; ttl is ignored (the session
// timeout bounds the lease). Refreshes of the Locker's leases whose nodes
// are watched share round trips (refreshShared: one per refreshGather);
// the others send one request: an exists, or a getData that also sets the
// watch a shared refresh needs on the current connection. It returns as
// soon as the lease is lost, even while the connection is down.
func (ls *lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if rel, lost := ls.stopped(); rel || lost {
		return fmt.Errorf("zookeeper: %w", driver.ErrNotHeld)
	}
	ok, _ := ls.refreshShared(ctx, ls.lost) // on an error, the round trip below tells
	if _, lost := ls.stopped(); lost {
		return fmt.Errorf("zookeeper: %w: %s", driver.ErrNotHeld, ls.reason())
	}
	switch {
	case ok:
		return nil
	case ctx.Err() != nil:
		return ls.l.wrapErr(ctx.Err())
	}
	// Not watched, or the shared round trip failed: one of its own.
	c, f := ls.beforeWatch()
	watch := ls.needsWatch(c, f)
	r, err := callUntil(ctx, ls.lost, func() (*zk.Stat, error) {
		if watch {
			_, st, _, err := ls.l.conn.GetW(ls.path)
			return st, err
		}
		ok, st, err := ls.l.conn.Exists(ls.path)
		if err == nil && !ok {
			err = zk.ErrNoNode
		}
		return st, err
	})
	if _, lost := ls.stopped(); lost {
		return fmt.Errorf("zookeeper: %w: %s", driver.ErrNotHeld, ls.reason())
	}
	switch {
	case errors.Is(err, zk.ErrNoNode):
		ls.lose("zookeeper: refresh found the lock node gone")
		return fmt.Errorf("zookeeper: %w: the lock node is gone", driver.ErrNotHeld)
	case err != nil:
		return ls.l.wrapErr(err)
	case r.EphemeralOwner != ls.sid || ls.l.conn.SessionID() != ls.sid || (ls.basic && uint64(r.Czxid) != ls.token):
		ls.lose("zookeeper: refresh found the lock node owned by another session")
		return fmt.Errorf("zookeeper: %w: the session changed", driver.ErrNotHeld)
	}
	if watch {
		// The watch's channel is dropped: the lease's own watch goroutine
		// ends the lease on a deletion; this one only counts in fires.
		ls.watched(c, f)
	}
	return nil
}

func (ls *lease) reason() string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.why
}

// Release deletes the node. The fair recipe's node has a name no other
// grant ever has; the basic recipe's release is a multi that checks the
// parent's data version set by this grant, so neither can delete another
// owner's lock.
func (ls *lease) Release(ctx context.Context) error {
	ls.mu.Lock()
	wasLost := ls.isLost
	if !ls.released {
		ls.released = true
		ls.onLost = nil
		close(ls.stop)
	}
	ls.mu.Unlock()
	if ls.lazy != nil {
		ls.lazy.Stop() // watch (rearm) returns at once if it fired
	}
	ls.l.s.unregister(ls)
	if wasLost {
		// The session may be gone, or the connection down: do not wait for
		// it. If the session lives on, the janitor deletes the node.
		ls.l.addOrphan(ls.orphan())
		return fmt.Errorf("zookeeper: %w: %s", driver.ErrNotHeld, ls.reason())
	}
	var err error
	if ls.basic {
		err = basicDelete(ctx, ls.l.conn, ls.path, ls.version)
		if errors.Is(err, zk.ErrBadVersion) {
			// The parent was written since the grant (an administrator, or
			// another client's rebaseGuard): check the node itself.
			err = basicDeleteOwned(ctx, ls.l.conn, ls.path, ls.token)
		}
	} else {
		err = deleteNode(ctx, ls.l.conn, ls.path)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion):
		return fmt.Errorf("zookeeper: %w: the lock node is gone", driver.ErrNotHeld)
	case errors.Is(err, zk.ErrClosing):
		return ls.l.wrapErr(err)
	}
	// The outcome is unknown (connection lost, ctx ended): make sure the
	// node goes once the connection is back, while its session lives.
	ls.l.addOrphan(ls.orphan())
	return ls.l.wrapErr(err)
}
