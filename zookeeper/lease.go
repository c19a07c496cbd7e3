package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

	mu       sync.Mutex
	isLost   bool
	released bool
	why      string
}

var (
	_ driver.Lease   = (*lease)(nil)
	_ driver.Granted = (*lease)(nil)
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
// set one, lazyWatch later).
func (ls *lease) start(watch <-chan zk.Event) {
	ls.l.s.register(ls)
	go func() {
		if watch == nil {
			// Set the watch a moment later: a lease released by then
			// costs no watch request (and no notification at release).
			t := time.NewTimer(lazyWatch)
			select {
			case <-t.C:
			case <-ls.stop:
				t.Stop()
				return
			case <-ls.lost:
				t.Stop()
				return
			}
		}
		ls.watch(watch)
	}()
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
	return true
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
		ctx, cancel := context.WithTimeout(context.Background(), max(ls.l.s.sessionTimeout(), time.Second))
		d, err := getW(ctx, ls.l.conn, ls.path)
		cancel()
		switch {
		case err == nil:
			if d.st.EphemeralOwner != ls.sid || (ls.basic && uint64(d.st.Czxid) != ls.token) {
				ls.lose("zookeeper: the lock node now belongs to another grant")
				return nil, false
			}
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

// Refresh verifies, in one round trip, that the node still exists and
// belongs to this lease's session, which the server keeps alive; ttl is
// ignored (the session timeout bounds the lease). It returns as soon as the
// lease is lost, even while the connection is down.
func (ls *lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if rel, lost := ls.stopped(); rel || lost {
		return fmt.Errorf("zookeeper: %w", driver.ErrNotHeld)
	}
	ctx, cancel := ls.untilLost(ctx)
	defer cancel()
	r, err := call(ctx, func() (*zk.Stat, error) {
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
	return nil
}

// untilLost returns ctx, also cancelled when the lease is lost: a request
// queued on a broken connection must not outlive the lease.
func (ls *lease) untilLost(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-ls.lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
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
		close(ls.stop)
	}
	ls.mu.Unlock()
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
