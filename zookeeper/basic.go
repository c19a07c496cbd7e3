package zookeeper

import (
	"bytes"
	"context"
	"errors"
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
	c := l.conn
	parent := l.parent(req.Name)
	path := parent + "/" + basicNode
	guid := newGUID()
	data := []byte(guid + "\n" + req.Owner)
	backoff := 10 * time.Millisecond
	pause := func() error {
		err := sleepCtx(ctx, backoff)
		backoff = min(2*backoff, time.Second)
		return err
	}
	defer func() { err = l.wrapErr(err) }()
	for {
		sid := c.SessionID()
		mr := make(chan result[[]zk.MultiResponse], 1)
		gr := make(chan result[nodeData], 1)
		sent := make(chan struct{})
		go func() {
			close(sent)
			r, err := c.Multi(
				&zk.CreateRequest{Path: path, Data: data, Acl: l.cfg.acl, Flags: zk.FlagEphemeral},
				&zk.SetDataRequest{Path: parent, Version: -1})
			mr <- result[[]zk.MultiResponse]{r, err}
		}()
		<-sent
		// Pipelined: the holder's node with a watch on it (ours when we won).
		go func() {
			d, st, ch, err := c.GetW(path)
			gr <- result[nodeData]{nodeData{d, st, ch}, err}
		}()
		var r result[[]zk.MultiResponse]
		select {
		case r = <-mr:
		case <-ctx.Done():
			l.basicAbandon(ctx, mr, parent, path, guid, sid)
			return nil, ctx.Err()
		}
		switch {
		case r.err == nil:
			st := r.v[1].Stat
			ls := l.newLease(path, sid, st.Mzxid, true, st.Version)
			var g result[nodeData]
			select {
			case g = <-gr:
			case <-ctx.Done():
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
				if err := basicDelete(cctx, c, path, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
					l.addOrphan(ls.orphan())
				}
				cancel()
				return nil, ctx.Err()
			}
			// The node's owner is the session the multi ran in (it may not
			// be the one read before sending it, across a reconnection).
			// The pipelined read normally sees our node; should it have
			// gone out first, read again.
			ours := func(d []byte) bool { return bytes.HasPrefix(d, []byte(guid+"\n")) }
			var watch <-chan zk.Event
			if g.err == nil && ours(g.v.data) {
				ls.sid, watch = g.v.st.EphemeralOwner, g.v.ch
			} else {
				d, st, err := getNode(ctx, c, path)
				switch {
				case err == nil && ours(d):
					ls.sid = st.EphemeralOwner
				case err == nil || errors.Is(err, zk.ErrNoNode):
					ls.sid = 0 // already gone: born lost
				default:
					l.addOrphan(ls.orphan())
					return nil, err
				}
			}
			ls.start(watch)
			return ls, nil
		case errors.Is(r.err, zk.ErrNodeExists):
			if !wait {
				return nil, &driver.NotAcquiredError{}
			}
			var g result[nodeData]
			select {
			case g = <-gr:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			switch {
			case g.err == nil:
				select {
				case <-g.v.ch: // released (or changed): try again
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			case errors.Is(g.err, zk.ErrNoNode): // released meanwhile
			default:
				if err := pause(); err != nil {
					return nil, err
				}
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
			if err := pause(); err != nil {
				return nil, err
			}
		default:
			return nil, r.err
		}
	}
}

// basicRecover finds out whether a multi whose reply was lost created our
// node. It reads the parent, then the node: requests of a session are
// applied in order, so both reads come after the multi; if the node is ours
// at the second read nobody else was granted in between, and the parent's
// version from the first read is our grant's.
func (l *locker) basicRecover(ctx context.Context, parent, path, guid string, sid int64) (driver.Lease, error) {
	for {
		_, pst, err := getNode(ctx, l.conn, parent)
		if err == nil {
			var d []byte
			var st *zk.Stat
			d, st, err = getNode(ctx, l.conn, path)
			if errors.Is(err, zk.ErrNoNode) {
				return nil, nil
			}
			if err == nil {
				if !bytes.HasPrefix(d, []byte(guid+"\n")) || st.EphemeralOwner != l.conn.SessionID() {
					return nil, nil
				}
				l.recovered.Add(1)
				ls := l.newLease(path, st.EphemeralOwner, st.Czxid, true, pst.Version)
				ls.start(nil)
				return ls, nil
			}
		}
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if !errors.Is(err, zk.ErrConnectionClosed) && !retryable(err) {
			return nil, err
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// basicAbandon cleans up after a cancelled acquire whose multi was in
// flight.
func (l *locker) basicAbandon(ctx context.Context, mr chan result[[]zk.MultiResponse], parent, path, guid string, sid int64) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
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
	}
	if ls, _ := l.basicRecover(cctx, parent, path, guid, sid); ls != nil {
		_ = ls.Release(cctx)
	}
}

// basicDelete deletes the basic lock node at path only if the parent's data
// version is still the one set by the grant.
func basicDelete(ctx context.Context, c *zk.Conn, path string, version int32) error {
	parent := path[:strings.LastIndexByte(path, '/')]
	_, err := call(ctx, func() ([]zk.MultiResponse, error) {
		return c.Multi(&zk.CheckVersionRequest{Path: parent, Version: version}, &zk.DeleteRequest{Path: path, Version: -1})
	})
	return err
}
