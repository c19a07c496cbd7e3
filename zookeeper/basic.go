package zookeeper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/driver"
)

// basicNode is the one lock node of a name in the basic recipe.
const basicNode = "lock"

// The basic recipe: whoever creates parent/lock (EPHEMERAL) holds the
// lock; everyone else watches that node and tries again when it goes (the
// herd effect: a release wakes every waiter). The create is a multi that
// also bumps the parent's data version, so each grant has its own version;
// the release is a multi that checks it before deleting, and can never
// delete a later grant's node. The token is the multi's zxid, which is the
// node's czxid.
func (l *locker) basicAcquire(ctx context.Context, req driver.Request, wait bool) (_ driver.Lease, err error) {
	parent := l.parent(req.Name)
	path := parent + "/" + basicNode
	guid := newGUID()
	data := []byte(guid + "\n" + req.Owner)
	var bo backoff
	defer func() { err = l.wrapErr(err) }()
	if err := l.knownParent(ctx, parent, false); err != nil {
		return nil, err
	}
	for {
		sid := l.conn.SessionID()
		mr := l.basicSend(parent, path, data)
		var r result[[]zk.MultiResponse]
		select {
		case r = <-mr:
		case <-ctx.Done():
			l.basicAbandon(ctx, mr, parent, path, guid, sid)
			return nil, ctx.Err()
		}
		switch {
		case r.err == nil:
			ls, err := l.basicGranted(ctx, r.v[1].Stat, parent, path, guid, sid)
			if ls != nil || err != nil {
				return ls, err
			}
			// Another grant since ours: try again.
		case errors.Is(r.err, zk.ErrNodeExists):
			if !wait {
				return nil, &driver.NotAcquiredError{}
			}
			l.waiting(true)
			err := basicAwaitRelease(ctx, l.conn, path, &bo)
			l.waiting(false)
			if err != nil {
				return nil, err
			}
		case errors.Is(r.err, zk.ErrNoNode):
			if err := l.ensureParents(ctx, parent, false); err != nil {
				return nil, err
			}
		case errors.Is(r.err, zk.ErrConnectionClosed):
			ls, err := l.basicRecover(ctx, parent, path, guid, sid)
			if ls != nil || err != nil {
				return ls, err
			}
		case retryable(r.err):
			if err := bo.pause(ctx); err != nil {
				return nil, err
			}
		default:
			return nil, r.err
		}
	}
}

// basicSend sends the grant's multi: create our node, bump the parent's
// data version. (A read of the node with a watch used to go with it,
// pipelined: the loser's watch, or the winner's. It cost every grant a
// request, 3 per acquire+release where the floor sends 2, to save a
// loser a round trip it spends waiting anyway; a loser now reads the node
// after its create failed, and a winner's lease sets its watch as the
// fair recipe's does, lazyWatch after the grant.)
func (l *locker) basicSend(parent, path string, data []byte) <-chan result[[]zk.MultiResponse] {
	c := l.conn
	mr := make(chan result[[]zk.MultiResponse], 1)
	go func() {
		r, err := c.Multi(
			&zk.CreateRequest{Path: path, Data: data, Acl: l.cfg.acl, Flags: zk.FlagEphemeral},
			&zk.SetDataRequest{Path: parent, Version: -1})
		mr <- result[[]zk.MultiResponse]{r, err}
	}()
	return mr
}

// basicGranted turns the grant our multi made into a lease; st is the
// parent's stat after the multi, sid the session read before it was sent.
// It returns neither a lease nor an error when the parent was written
// since and the node is no longer ours.
func (l *locker) basicGranted(ctx context.Context, st *zk.Stat, parent, path, guid string, sid int64) (driver.Lease, error) {
	version, err := rebaseGuard(ctx, l.conn, parent, st.Version)
	if errors.Is(err, zk.ErrBadVersion) {
		// The parent was written since our grant: look at the node
		// itself (ours, or another grant's).
		return l.basicRecover(ctx, parent, path, guid, sid)
	}
	if err != nil {
		l.addOrphan(orphan{path: path, parent: parent, guid: guid, basic: true})
		return nil, err
	}
	ls := l.newLease(path, sid, st.Mzxid, true, version)
	if ls.sid, err = l.basicOwner(ctx, path, guid, sid); err != nil {
		l.addOrphan(ls.orphan())
		return nil, err
	}
	ls.start(nil)
	return ls, nil
}

// basicOwner returns the session that owns our new node: the session the
// multi ran in, sid when the connection's session is still the one read
// before sending it (a session's ID never comes back); across a
// reconnection the node's ephemeralOwner says, 0 when it is no longer our
// grant's (the lease is born lost).
func (l *locker) basicOwner(ctx context.Context, path, guid string, sid int64) (int64, error) {
	if l.conn.SessionID() == sid {
		return sid, nil
	}
	d, st, err := getNode(ctx, l.conn, path)
	switch {
	case err == nil && basicGrantOf(d, guid):
		return st.EphemeralOwner, nil
	case err == nil || errors.Is(err, zk.ErrNoNode):
		return 0, nil
	default:
		return 0, err
	}
}

// basicGrantOf reports whether data, a basic lock node's, is the grant of
// the attempt guid.
func basicGrantOf(data []byte, guid string) bool { return bytes.HasPrefix(data, []byte(guid+"\n")) }

// basicAwaitRelease waits, after a create found the lock held, until the
// holder's node at path changes or goes: it reads it with a watch (gone
// already: try again at once), then waits for the watch.
func basicAwaitRelease(ctx context.Context, c *zk.Conn, path string, bo *backoff) error {
	g, err := getW(ctx, c, path)
	switch {
	case err == nil:
		select {
		case <-g.ch: // released (or changed): try again
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case errors.Is(err, zk.ErrNoNode): // released meanwhile
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		return bo.pause(ctx)
	}
}

// basicRecover finds out whether a multi whose reply was lost created our
// node. It reads the parent, then the node: requests of a session are
// applied in order, so both reads come after the multi; if the node is ours
// at the second read nobody else was granted in between, and the parent's
// version from the first read is our grant's.
func (l *locker) basicRecover(ctx context.Context, parent, path, guid string, sid int64) (driver.Lease, error) {
	for {
		st, version, err := l.basicFind(ctx, parent, path, guid)
		if err == nil {
			if st == nil {
				return nil, nil
			}
			l.recovered.Add(1)
			ls := l.newLease(path, st.EphemeralOwner, st.Czxid, true, version)
			ls.start(nil)
			return ls, nil
		}
		if !errors.Is(err, zk.ErrConnectionClosed) && !retryable(err) {
			return nil, err
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// basicFind reads whether the lock node at path is the grant of the
// attempt guid in the connection's session now; st is nil when it is not
// (or there is none), else the node's stat and version the parent's data
// version of that grant. See basicRecover.
func (l *locker) basicFind(ctx context.Context, parent, path, guid string) (st *zk.Stat, version int32, err error) {
	_, pst, err := getNode(ctx, l.conn, parent)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	d, st, err := getNode(ctx, l.conn, path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if !basicGrantOf(d, guid) || st.EphemeralOwner != l.conn.SessionID() {
		return nil, 0, nil
	}
	version, err = rebaseGuard(ctx, l.conn, parent, pst.Version)
	if errors.Is(err, zk.ErrBadVersion) {
		return nil, 0, nil // another grant since: not ours any more
	}
	return st, version, err
}

// basicAbandon cleans up after a cancelled acquire whose multi was in
// flight, in the background (see cleanup).
func (l *locker) basicAbandon(ctx context.Context, mr <-chan result[[]zk.MultiResponse], parent, path, guid string, sid int64) {
	l.cleanup(ctx, func(cctx context.Context) { l.basicCleanUp(cctx, mr, parent, path, guid, sid) })
}

func (l *locker) basicCleanUp(cctx context.Context, mr <-chan result[[]zk.MultiResponse], parent, path, guid string, sid int64) {
	select {
	case r := <-mr:
		switch {
		case r.err == nil:
			if err := basicDelete(cctx, l.conn, path, r.v[1].Stat.Version); err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
				l.addOrphan(orphan{path: path, basic: true, basicVersion: r.v[1].Stat.Version})
			}
			return
		case !errors.Is(r.err, zk.ErrConnectionClosed):
			return // not applied
		}
	case <-cctx.Done():
		// Still in flight (the server does not answer): the janitor's
		// reads, sent after it in the same session, will see its effect.
	}
	o := orphan{path: path, parent: parent, guid: guid, basic: true}
	if !l.deleteOrphan(cctx, o) {
		l.addOrphan(o)
	}
}

// basicDelete deletes the basic lock node at path only if the parent's data
// version is still the one set by the grant. It never sends -1 as the
// expected version (see rebaseGuard).
func basicDelete(ctx context.Context, c *zk.Conn, path string, version int32) error {
	parent := path[:strings.LastIndexByte(path, '/')]
	version, err := rebaseGuard(ctx, c, parent, version)
	if err != nil {
		return err
	}
	_, err = call(ctx, func() ([]zk.MultiResponse, error) {
		return c.Multi(&zk.CheckVersionRequest{Path: parent, Version: version}, &zk.DeleteRequest{Path: path, Version: -1})
	})
	return err
}

// basicDeleteOwned deletes the basic lock node at path if it is still the
// grant with czxid token: used when the parent's version no longer matches
// the grant's (someone else wrote the parent, e.g. rebaseGuard). It reads
// the parent, then the node (a session's requests are applied in order):
// while the node is this grant's nobody else can be granted, so the
// parent's version read before it guards the delete.
func basicDeleteOwned(ctx context.Context, c *zk.Conn, path string, token uint64) error {
	parent := path[:strings.LastIndexByte(path, '/')]
	_, pst, err := getNode(ctx, c, parent)
	if err != nil {
		return err
	}
	_, st, err := getNode(ctx, c, path)
	if err != nil {
		return err
	}
	if uint64(st.Czxid) != token {
		return zk.ErrNoNode // another grant's node
	}
	return basicDelete(ctx, c, path, pst.Version)
}

// Versions. A znode's data version is a Java int: it wraps from MaxInt32
// to MinInt32 and, 2^32 writes after 0, reaches -1, which a conditional
// operation reads as "any version". The basic recipe bumps its parent's
// version at every grant and guards the release with it, so a grant whose
// version is -1 would be released by a check that checks nothing.
const anyVersion int32 = -1

// nextVersion is the server's increment of a data version (Go's int32
// wraps as Java's int does).
func nextVersion(v int32) int32 { return v + 1 }

// guardFor returns the expected parent version that guards a grant that
// left the parent at version v, and whether the parent must first be
// bumped to reach it: never -1, which would check nothing.
func guardFor(v int32) (guard int32, bump bool) {
	if v != anyVersion {
		return v, false
	}
	return nextVersion(v), true
}

// rebaseGuard returns the guard of a grant that left the parent at version
// v (guardFor). When the parent must be bumped off -1 it does so
// unconditionally (the only way) and keeps the new version only if it is
// exactly the guard, which proves that no other write, hence no other
// grant, happened since ours; otherwise it returns an error wrapping
// zk.ErrBadVersion (the parent, maybe the lock, has moved on).
func rebaseGuard(ctx context.Context, c *zk.Conn, parent string, v int32) (int32, error) {
	g, bump := guardFor(v)
	if !bump {
		return g, nil
	}
	st, err := call(ctx, func() (*zk.Stat, error) { return c.Set(parent, nil, anyVersion) })
	if err != nil {
		return 0, err
	}
	if st.Version != g {
		return 0, fmt.Errorf("%w: the parent was written since the grant", zk.ErrBadVersion)
	}
	return g, nil
}
