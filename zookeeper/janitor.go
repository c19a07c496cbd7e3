package zookeeper

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// orphan is a node to delete in the background: the node of a lease lost
// while its session may live on, of an attempt whose clean-up failed, or
// one whose create reply was lost (path empty: found by guid in parent; a
// basic-recipe node with a guid: deleted if its data says it is that
// attempt's grant).
type orphan struct {
	path         string
	parent, guid string
	basic        bool // a basic-recipe lock node: delete only with basicVersion
	basicVersion int32
	tries        int
}

func (l *locker) addOrphan(o orphan) {
	l.jmu.Lock()
	l.orphans = append(l.orphans, o)
	l.jmu.Unlock()
	select {
	case l.jwake <- struct{}{}:
	default:
	}
}

// janitor deletes orphans as they come, retrying every 200ms those it
// could not delete yet (the connection is down); idle, it sleeps.
func (l *locker) janitor() {
	for {
		l.jmu.Lock()
		pending := len(l.orphans) > 0
		l.jmu.Unlock()
		var retry <-chan time.Time
		if pending {
			retry = time.After(200 * time.Millisecond)
		}
		select {
		case <-l.done:
			return
		case <-l.jwake:
		case <-retry:
		}
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		l.sweep(ctx)
		cancel()
	}
}

// sweep tries each orphan once.
func (l *locker) sweep(ctx context.Context) {
	l.jmu.Lock()
	todo := l.orphans
	l.orphans = nil
	l.jmu.Unlock()
	var keep []orphan
	for _, o := range todo {
		if !l.deleteOrphan(ctx, o) && o.tries < 1000 {
			o.tries++
			keep = append(keep, o)
		}
	}
	if len(keep) > 0 {
		l.jmu.Lock()
		l.orphans = append(l.orphans, keep...)
		l.jmu.Unlock()
	}
}

// deleteOrphan reports whether o is gone. It deletes a node only while it
// belongs to the connection's session now: a node of an ended session
// vanishes by itself, and the basic recipe's node may be another client's.
func (l *locker) deleteOrphan(ctx context.Context, o orphan) bool {
	if l.conn.State() != zk.StateHasSession {
		return false
	}
	if o.basic && o.guid != "" {
		st, version, err := l.basicFind(ctx, o.parent, o.path, o.guid)
		switch {
		case err != nil:
			return false
		case st == nil:
			return true
		}
		return l.deleteOrphan(ctx, orphan{path: o.path, basic: true, basicVersion: version})
	}
	if o.path == "" {
		kids, err := children(ctx, l.conn, o.parent)
		if errors.Is(err, zk.ErrNoNode) {
			return true
		}
		if err != nil {
			return false
		}
		for _, k := range kids {
			if g, _, ok := parseChild(k); ok && g == o.guid {
				if !l.deleteOrphan(ctx, orphan{path: o.parent + "/" + k}) {
					return false
				}
			}
		}
		return true
	}
	owner, live, err := sessionOf(ctx, l.conn, o.path, 0)
	switch {
	case err != nil:
		return false
	case owner == 0 || !live:
		return true // gone, or owned by a session that is not ours now
	case o.basic:
		err = basicDelete(ctx, l.conn, o.path, o.basicVersion)
		return err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion)
	default:
		err = deleteNode(ctx, l.conn, o.path)
		return err == nil || errors.Is(err, zk.ErrNoNode)
	}
}

// cleanupGrace is how long a failed or cancelled attempt whose ctx has
// ended waits for its clean-up before it returns, leaving the clean-up to
// finish in the background. Against a responsive server the clean-up (one
// or two round trips) is done by then, so the caller returns with nothing
// left on the server; against a frozen one the caller is not held hostage.
const cleanupGrace = 25 * time.Millisecond

// cleanupTimeout bounds the fresh context of one clean-up.
const cleanupTimeout = 5 * time.Second

// cleanup runs f, the clean-up of a failed or cancelled attempt, in the
// background with a fresh context bounded by cleanupTimeout (never the
// caller's, which may have ended). It waits for f while ctx lives (a
// TryAcquire that returns ErrNotAcquired has deleted its node), and at most
// cleanupGrace after ctx ended. Close waits for every clean-up; what f
// cannot delete in time it hands to the janitor, which retries while the
// session lives.
func (l *locker) cleanup(ctx context.Context, f func(cctx context.Context)) {
	done := l.bg.Go(func() {
		cctx, cancel := context.WithTimeout(l.bgCtx, cleanupTimeout)
		defer cancel()
		f(cctx)
	})
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	t := time.NewTimer(cleanupGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
