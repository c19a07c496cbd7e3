package zookeeper

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/driver"
)

// Child names are protected, as in go-zookeeper's CreateProtectedEphemeralSequential
// and Curator: "_c_" + a 32-hex-digit GUID of the attempt + a tag + the
// server's 10-digit sequence number. The tag is "-lock-" for a lock and
// "-sem<N>-" for a permit of a semaphore of N permits, so that a listing
// shows every queued attempt's N.
const (
	protectedPrefix = "_c_"
	childTag        = "-lock-"
	semTag          = "-sem"
	guidLen         = 32
)

func childPrefix(guid string) string { return protectedPrefix + guid + childTag }

// permitPrefix is childPrefix for a permit of a semaphore of n permits.
func permitPrefix(guid string, n int) string {
	return protectedPrefix + guid + semTag + strconv.Itoa(n) + "-"
}

// parseChild splits a child name into the GUID and the sequence number.
func parseChild(name string) (guid string, seq int64, ok bool) {
	guid, _, seq, ok = parseProtected(name)
	return guid, seq, ok
}

// parseProtected splits a child name into the GUID, the number of permits
// (0 for a lock's node) and the sequence number.
func parseProtected(name string) (guid string, permits int, seq int64, ok bool) {
	rest, found := strings.CutPrefix(name, protectedPrefix)
	if !found || len(rest) < guidLen+len(childTag)+1 {
		return "", 0, 0, false
	}
	guid, rest = rest[:guidLen], rest[guidLen:]
	digits, found := strings.CutPrefix(rest, childTag)
	if !found {
		// "-sem<N>-<sequence>": the sequence may be negative (it wraps
		// after 2^31 creates in one parent), so cut at the first '-'.
		tail, isSem := strings.CutPrefix(rest, semTag)
		n, after, found := strings.Cut(tail, "-")
		if !isSem || !found || n == "" || n[0] == '0' {
			return "", 0, 0, false
		}
		var err error
		if permits, err = strconv.Atoi(n); err != nil || permits < 1 {
			return "", 0, 0, false
		}
		digits = after
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return "", 0, 0, false
	}
	return guid, permits, seq, true
}

// queued is one child of a lock's parent.
type queued struct {
	name    string
	guid    string
	permits int // the N of a semaphore's permit (0: a lock's node, or foreign)
	seq     int64
}

// sortQueue orders children by sequence number. A child this package did
// not create counts as ahead of everyone (never skipped).
func sortQueue(kids []string) []queued {
	q := make([]queued, 0, len(kids))
	for _, k := range kids {
		g, n, seq, ok := parseProtected(k)
		if !ok {
			seq = math.MinInt64
		}
		q = append(q, queued{name: k, guid: g, permits: n, seq: seq})
	}
	slices.SortFunc(q, func(a, b queued) int {
		if a.seq != b.seq {
			if a.seq < b.seq {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return q
}

// errRequeue: the attempt's node vanished (revoked, or its session expired)
// before the grant; the attempt starts again with a new node.
var errRequeue = errors.New("zookeeper: queue node vanished")

// attempt is one acquisition with the fair recipe.
type attempt struct {
	l       *locker
	parent  string
	guid    string
	data    []byte
	permits int // 0 for a lock; a semaphore's N

	node    string // our node's path once known
	name    string // its last element
	seq     int64
	sid     int64                  // the session the node belongs to
	unknown bool                   // a create may have been applied without a reply
	czxid   int64                  // our node's czxid (0: unknown)
	pending <-chan result[created] // a create still in flight when ctx ended
}

// created is the outcome of the create.
type created struct {
	path  string
	czxid int64
	alone bool // the parent had no other child right after the create
}

// view is where our node stands in the queue: from a listing that
// contains it, or from the create's reply when it was alone.
type view struct {
	below []queued        // nodes ahead of ours, ascending
	ch    <-chan zk.Event // the child watch the listing set
	alone bool            // the create found our node alone: no listing
}

type childList struct {
	kids []string
	st   *zk.Stat
	ch   <-chan zk.Event
}

func (l *locker) fairAcquire(ctx context.Context, req driver.Request, wait bool) (_ driver.Lease, err error) {
	a := &attempt{l: l, parent: l.parent(req.Name), guid: newGUID(), data: []byte(req.Owner), permits: req.Permits}
	if req.Permits > 0 {
		a.parent = l.semParent(req.Name)
	}
	defer func() {
		if err != nil {
			a.abandon(ctx)
			err = l.wrapErr(err)
		}
	}()
	holders := max(a.permits, 1) // a lock is a semaphore of one permit
	for {
		v, err := a.enqueue(ctx)
		if err != nil {
			return nil, err
		}
		if err := a.checkPermits(req.Name, v); err != nil {
			return nil, err
		}
		var ls driver.Lease
		switch {
		case len(v.below) < holders:
			ls, err = a.grantListed(ctx, v)
		case !wait:
			return nil, &driver.NotAcquiredError{}
		case a.permits > 0:
			l.waiting(true)
			ls, err = a.waitPermit(ctx, v.below)
			l.waiting(false)
		default:
			l.waiting(true)
			ls, err = a.wait(ctx, v.below)
			l.waiting(false)
		}
		if errors.Is(err, errRequeue) {
			a.node = ""
			continue
		}
		return ls, err
	}
}

func (a *attempt) setNode(path string, sid int64) {
	a.node, a.sid, a.unknown, a.czxid = path, sid, false, 0
	a.name = path[strings.LastIndexByte(path, '/')+1:]
	_, a.seq, _ = parseChild(a.name)
}

// enqueue makes sure our node exists and returns where it stands. An
// uncontended attempt needs one round trip: the create's reply says
// whether our node was alone, hence the lowest (see create). Otherwise
// the queue is listed (getChildren with a watch), a second round trip that
// a contended attempt mostly spends while it would wait anyway. (Sending
// that getChildren along with every create, pipelined, was measured in the
// same process, alternating with this: it made an uncontended
// acquire+release 10–26% slower and a handoff between waiters no faster,
// so it is not done.) When a create's reply was lost, the listing finds
// our node by its GUID.
func (a *attempt) enqueue(ctx context.Context) (view, error) {
	l, c := a.l, a.l.conn
	var bo backoff
	for {
		if a.node == "" && !a.unknown {
			if err := l.knownParent(ctx, a.parent, true); err != nil {
				return view{}, err
			}
			sid := c.SessionID()
			cr := a.create()
			var r result[created]
			select {
			case r = <-cr:
			case <-ctx.Done():
				a.pending, a.sid = cr, sid
				return view{}, ctx.Err()
			}
			switch {
			case r.err == nil:
				owner, live, err := sessionOf(ctx, c, r.v.path, sid)
				if err != nil {
					return view{}, err
				}
				if !live {
					continue // created in a session that has since ended
				}
				a.setNode(r.v.path, owner)
				a.czxid = r.v.czxid
				if r.v.alone {
					// No child but ours in the transaction that created it:
					// ours is the lowest, and every later one is higher.
					return view{alone: true}, nil
				}
			case errors.Is(r.err, zk.ErrNoNode):
				// The server deleted the empty parent since we saw it.
				if err := l.ensureParents(ctx, a.parent, true); err != nil {
					return view{}, err
				}
				continue
			case errors.Is(r.err, zk.ErrConnectionClosed):
				// The server may have applied the create: its reply was
				// lost. Our GUID finds the node in the listing below.
				a.unknown, a.sid = true, sid
			case retryable(r.err):
				if err := bo.pause(ctx); err != nil {
					return view{}, err
				}
				continue
			default:
				return view{}, r.err
			}
		}

		r, err := call(ctx, func() (childList, error) {
			k, st, ch, err := c.ChildrenW(a.parent)
			return childList{k, st, ch}, err
		})
		switch {
		case err == nil:
		case errors.Is(err, zk.ErrNoNode):
			a.node, a.unknown = "", false // no parent: no node of ours either
			continue
		case errors.Is(err, zk.ErrConnectionClosed) || retryable(err):
			if err := bo.pause(ctx); err != nil {
				return view{}, err
			}
			continue
		default:
			return view{}, err
		}
		if a.unknown {
			a.unknown = false
			for _, k := range r.kids {
				if g, _, ok := parseChild(k); ok && g == a.guid {
					owner, live, err := sessionOf(ctx, c, a.parent+"/"+k, 0)
					if err != nil {
						return view{}, err
					}
					if live {
						a.setNode(a.parent+"/"+k, owner)
						l.recovered.Add(1)
					}
					break
				}
			}
			if a.node == "" {
				continue // the create was not applied: send it again
			}
		}
		if v, ok := a.view(r); ok {
			return v, nil
		}
		a.node = "" // our node vanished: start again
	}
}

// create sends the create of our node. It is a multi, so that the reply
// carries our czxid (the parent's mzxid after the setData of the same
// transaction) and the parent's child count right after the create.
func (a *attempt) create() <-chan result[created] {
	cr := make(chan result[created], 1)
	go func() {
		r, err := a.l.conn.Multi(
			&zk.CreateRequest{Path: a.parent + "/" + a.childPrefix(), Data: a.data, Acl: a.l.cfg.acl, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: a.parent, Version: -1})
		if err != nil {
			cr <- result[created]{err: err}
			return
		}
		cr <- result[created]{v: created{path: r[0].String, czxid: r[1].Stat.Mzxid, alone: r[1].Stat.NumChildren == 1}}
	}()
	return cr
}

// childPrefix is our node's name before the server's sequence number.
func (a *attempt) childPrefix() string {
	if a.permits > 0 {
		return permitPrefix(a.guid, a.permits)
	}
	return childPrefix(a.guid)
}

// sessionOf returns the session that owns the ephemeral node at path,
// created by a request sent while the session was before, and whether that
// is the connection's session now. The session can change between reading
// it and the request reaching the server (a reconnection after an expiry);
// when it did, or before is unknown (0), the node's ephemeralOwner says.
func sessionOf(ctx context.Context, c *zk.Conn, path string, before int64) (int64, bool, error) {
	if before != 0 && c.SessionID() == before {
		return before, true, nil
	}
	st, err := call(ctx, func() (*zk.Stat, error) {
		ok, st, err := c.Exists(path)
		if err == nil && !ok {
			err = zk.ErrNoNode
		}
		return st, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return st.EphemeralOwner, st.EphemeralOwner == c.SessionID(), nil
}

// view computes the nodes ahead of ours from a listing; false when our
// node is not in it (or our session changed).
func (a *attempt) view(r childList) (view, bool) {
	if a.node == "" || a.l.conn.SessionID() != a.sid || !slices.Contains(r.kids, a.name) {
		return view{}, false
	}
	v := view{ch: r.ch}
	for _, q := range sortQueue(r.kids) {
		if q.name == a.name {
			break
		}
		if q.guid == a.guid {
			// A second node of this attempt (a create applied after its
			// reply was lost and the create was sent again): ours to delete.
			a.l.addOrphan(orphan{path: a.parent + "/" + q.name})
			a.l.strays.Add(1)
			continue
		}
		v.below = append(v.below, q)
	}
	return v, true
}

// grantListed grants the lock to a node that a listing found lowest. The
// token is our czxid from the create's reply; only a node recovered by GUID
// after a lost reply needs a getData for it.
func (a *attempt) grantListed(ctx context.Context, v view) (driver.Lease, error) {
	if a.czxid != 0 && v.alone {
		return a.grant(a.czxid, nil)
	}
	if a.czxid != 0 && v.ch != nil {
		return a.grant(a.czxid, v.ch)
	}
	a.l.slowGrants.Add(1)
	d, err := getW(ctx, a.l.conn, a.node)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, errRequeue
	}
	if err != nil {
		return nil, err
	}
	return a.grant(d.st.Czxid, d.ch)
}

// grant turns our node into a lease; watch is a child watch on the parent
// or a data watch on the node (nil: the lease sets one).
func (a *attempt) grant(czxid int64, watch <-chan zk.Event) (driver.Lease, error) {
	if a.l.conn.SessionID() != a.sid {
		return nil, errRequeue // a waiter whose session expired is never granted
	}
	ls := a.l.newLease(a.node, a.sid, czxid, false, 0)
	a.node = "" // the lease owns it now
	ls.start(watch)
	return ls, nil
}

// wait queues until every node ahead of ours is gone.
//
// It watches the node just ahead (pred) and, when there is one, the node
// ahead of that (pp). When pred goes and the listing had nothing else ahead,
// the lock is ours without another round trip: nodes ahead of ours can only
// leave, never arrive (a later create gets a higher sequence number). When
// pp goes (usually: pred was granted the lock), the queue is listed again
// off the critical path, so that by the time pred releases we know pred is
// the last one ahead. A release thus wakes two waiters at most, not the
// herd; the next holder is granted on the deletion event itself, and its
// token (our czxid) was read while queueing, together with a watch on our
// own node that tells a revoked waiter to queue again.
func (a *attempt) wait(ctx context.Context, below []queued) (driver.Lease, error) {
	w := &queueWatch{a: a, below: below, watched: make(map[string]<-chan zk.Event)}
	for {
		below := w.below
		if len(below) == 0 {
			return a.grantWaited(ctx, w.czxid, w.own)
		}
		pred := below[len(below)-1].name
		pp := ""
		if len(below) >= 2 {
			pp = below[len(below)-2].name
		}
		if again, err := w.arm(ctx, pred, pp); err != nil || again {
			if err != nil {
				return nil, err
			}
			continue
		}
		var ppCh <-chan zk.Event
		if pp != "" {
			ppCh = w.watched[pp]
		}
		var err error
		select {
		case ev := <-w.watched[pred]:
			delete(w.watched, pred)
			if err := notWatching(ev); err != nil {
				return nil, err
			}
			if ev.Type != zk.EventNodeDeleted {
				continue // re-arm
			}
			w.below = below[:len(below)-1]
			if len(w.below) > 0 {
				a.l.waitRelists.Add(1)
				if w.below, err = a.relist(ctx); err != nil {
					return nil, err
				}
			} else {
				a.l.fastGrants.Add(1)
			}
		case ev := <-ppCh:
			delete(w.watched, pp)
			if err := notWatching(ev); err != nil {
				return nil, err
			}
			if ev.Type == zk.EventNodeDeleted {
				w.below = slices.DeleteFunc(below, func(q queued) bool { return q.name == pp })
				if len(w.below) > 1 {
					// Nodes further ahead may be gone too: list again, so
					// that only pred is left when its turn comes.
					if w.below, err = a.relist(ctx); err != nil {
						return nil, err
					}
				}
			}
		case ev := <-w.own:
			if err := w.ownEvent(ev); err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// queueWatch is what a waiter knows and watches: the nodes ahead of ours
// (below, ascending), the data watches it has set on some of them
// (watched), and its own node's watch (own) and czxid, its token.
type queueWatch struct {
	a       *attempt
	below   []queued
	watched map[string]<-chan zk.Event
	own     <-chan zk.Event
	czxid   int64
	bo      backoff
}

// arm sets, in one pipelined batch, the watches still missing: on our node
// and on the nodes ahead named. It reports again when the caller must
// look at below afresh: a node ahead was gone (it is dropped from below,
// since nodes ahead of ours can only leave), or a request failed
// transiently (after a pause). Our node gone, or owned by another session,
// is errRequeue.
func (w *queueWatch) arm(ctx context.Context, names ...string) (again bool, _ error) {
	a := w.a
	var paths []string
	if w.own == nil {
		paths = append(paths, a.node)
	}
	for _, n := range names {
		if n != "" && w.watched[n] == nil {
			paths = append(paths, a.parent+"/"+n)
		}
	}
	res, err := getWAll(ctx, a.l.conn, paths)
	if err != nil {
		return false, err
	}
	changed, transient := false, false
	for i, p := range paths {
		r := res[i]
		name := p[strings.LastIndexByte(p, '/')+1:]
		switch {
		case r.err == nil && p == a.node:
			if r.v.st.EphemeralOwner != a.sid {
				return false, errRequeue
			}
			w.own, w.czxid = r.v.ch, r.v.st.Czxid
		case r.err == nil:
			w.watched[name] = r.v.ch
		case errors.Is(r.err, zk.ErrNoNode) && p == a.node:
			return false, errRequeue
		case errors.Is(r.err, zk.ErrNoNode):
			w.below = slices.DeleteFunc(w.below, func(q queued) bool { return q.name == name })
			changed = true
		case errors.Is(r.err, zk.ErrClosing):
			return false, r.err
		default:
			transient = true
		}
	}
	if changed {
		return true, nil
	}
	if transient {
		return true, w.bo.pause(ctx)
	}
	return false, nil
}

// ownEvent handles an event of the watch on our own node: deleted (revoked,
// or the session expired) is errRequeue; anything else re-arms it.
func (w *queueWatch) ownEvent(ev zk.Event) error {
	w.own = nil
	if err := notWatching(ev); err != nil {
		return err
	}
	if ev.Type == zk.EventNodeDeleted {
		return errRequeue
	}
	return nil
}

// notWatching maps go-zookeeper's "watches are gone" event: after a session
// expiry our node is gone too (queue again); after Close, ErrClosed.
func notWatching(ev zk.Event) error {
	if ev.Type != zk.EventNotWatching {
		return nil
	}
	if errors.Is(ev.Err, zk.ErrClosing) {
		return ev.Err
	}
	return errRequeue
}

// relist lists the queue again and returns the nodes ahead of ours.
func (a *attempt) relist(ctx context.Context) ([]queued, error) {
	for {
		kids, err := children(ctx, a.l.conn, a.parent)
		switch {
		case err == nil:
			v, ok := a.view(childList{kids: kids})
			if !ok {
				return nil, errRequeue
			}
			return v.below, nil
		case errors.Is(err, zk.ErrNoNode):
			return nil, errRequeue
		case errors.Is(err, zk.ErrConnectionClosed) || retryable(err):
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
	}
}

// grantWaited grants the lock after the wait; own is the data watch on our
// node (set while queueing) and czxid our token.
func (a *attempt) grantWaited(ctx context.Context, czxid int64, own <-chan zk.Event) (driver.Lease, error) {
	if own != nil {
		select {
		case ev := <-own:
			if err := notWatching(ev); err != nil {
				return nil, err
			}
			if ev.Type == zk.EventNodeDeleted {
				return nil, errRequeue
			}
			own = nil
		default:
		}
	}
	if own == nil {
		d, err := getW(ctx, a.l.conn, a.node)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, errRequeue
		}
		if err != nil {
			return nil, err
		}
		own, czxid = d.ch, d.st.Czxid
	}
	return a.grant(czxid, own)
}

// abandon deletes what a failed or cancelled attempt left: its node, a
// node whose create is still in flight, or a node whose create reply was
// lost (found by GUID). It runs as a clean-up (see cleanup): in the
// background with a fresh bounded context, so a cancelled Acquire returns
// at once even when the server does not answer; what cannot be deleted in
// time is left to the janitor.
func (a *attempt) abandon(ctx context.Context) {
	if a.node == "" && !a.unknown && a.pending == nil {
		return
	}
	a.l.cleanup(ctx, a.cleanUp)
}

func (a *attempt) cleanUp(cctx context.Context) {
	if a.pending != nil {
		select {
		case r := <-a.pending:
			if r.err == nil {
				a.setNode(r.v.path, a.sid)
			} else if errors.Is(r.err, zk.ErrConnectionClosed) {
				a.unknown = true
			}
		case <-cctx.Done():
			// Still in flight: a listing sent after it on the same
			// session sees its node, found by GUID.
			a.unknown = true
		}
	}
	if a.node != "" {
		if err := deleteNode(cctx, a.l.conn, a.node); err != nil && !errors.Is(err, zk.ErrNoNode) {
			a.l.addOrphan(orphan{path: a.node})
		}
	}
	if a.unknown {
		o := orphan{parent: a.parent, guid: a.guid}
		if !a.l.deleteOrphan(cctx, o) {
			a.l.addOrphan(o)
		}
	}
}
