package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/driver"
)

// errRequeue: the attempt's key vanished before the grant (its lease
// expired or was revoked while it waited); the attempt was abandoned and
// starts again with a new lease and key.
var errRequeue = errors.New("etcd: queued key vanished")

// attempt is one acquisition: an etcd lease of the TTL and a key under it
// in the name's queue.
type attempt struct {
	l       *locker
	queue   string // "<prefix>/<escaped name>/" (a semaphore's: "<prefix>/<escaped name>%sem/")
	value   string // the key's value: the owner (a semaphore's: "<N>\n<owner>")
	permits int    // 0 for a lock; a semaphore's N
	ttl     int64  // seconds

	start   time.Time // the grant time of enqueue's grant (see lease.at)
	renewed time.Time // start of the etcd lease's last successful grant or renewal
	id      clientv3.LeaseID
	tag     uint64 // drawn at the etcd lease's grant (keyOf)
	key     string
	rev     int64 // our key's create revision: the fencing token once granted

	// pred is a lock's predecessor as enqueue's transaction read it (the
	// key with the greatest create revision below ours), nil when unknown
	// or none: wait watches it without a look of its own. predSeen is the
	// revision of that read.
	pred     *mvccpb.KeyValue
	predSeen int64
	// below is every key below ours (name → create revision) when
	// enqueue's transaction read the whole queue (at most maxBelow keys
	// ahead), else nil: wait then watches their deletes and its own key
	// on one watch, which proves the grant without a read (see wait).
	below map[string]int64
}

// maxBelow is the most keys ahead of ours that enqueue reads to know them
// all (a longer queue is waited on by the predecessor's watch alone).
const maxBelow = 8

// enqueue's range must reach past our own key to the predecessor, or every
// attempt looks first: with maxBelow 0 (a range of one key, ours), eight
// Lockers taking turns on one name, each holding it 1ms, made 1 330 grants
// a second, several holders at once (and the conformance suite fails).
// This fails to compile below 1.
const _ = uint(maxBelow - 1)

// enqueue takes a spare etcd lease of the TTL (or grants one) and
// creates the key under it in one transaction that also reads what decides
// the grant (etcd's concurrency.Mutex recipe reads the lowest create
// revision of the queue; a lock's transaction reads the two newest keys:
// ours, and the predecessor if there is one, see enqueueOps). A spare
// renewed within the reuse window (the spare second, spares.go) is taken as it is:
// the server holds it a whole TTL from now already. Another is renewed at
// the same time, both requests in flight together, so that the server
// holds the lease a whole TTL from the acquisition's start: one round
// trip's time with a spare either way. It returns the queue's range that
// decides the grant (see holds), and keeps a lock's predecessor, which a
// waiter then watches.
func (a *attempt) enqueue(ctx context.Context) (*etcdserverpb.RangeResponse, error) {
	var renewed chan time.Time
	if sp, ok := a.l.spares.take(a.ttl); ok {
		a.id, a.tag = sp.id, sp.tag
		a.start, a.renewed = time.Now(), sp.renewed
	}
	if a.id != 0 && a.start.Sub(a.renewed) >= reuseWindow(a.ttl) {
		sp := spare{id: a.id, renewed: a.renewed}
		renewed = make(chan time.Time, 1)
		go func() {
			start := time.Now()
			if _, err := a.l.renewer.renew(ctx, sp.id); err != nil {
				start = sp.renewed // the renewal before still bounds it
			}
			renewed <- start
		}()
	}
	if a.id == 0 {
		a.start = time.Now()
		g, err := a.l.cli.Grant(ctx, leaseSeconds(a.ttl))
		if err != nil {
			return nil, err
		}
		a.id, a.tag, a.renewed = g.ID, grantTag(), a.start
	}
	a.key = keyOf(a.queue, a.id, a.tag)
	resp, err := a.l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0)).
		Then(a.enqueueOps()...).
		Commit()
	if renewed != nil {
		a.start = <-renewed
		a.renewed = a.start
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		a.id = 0 // a spare that expired behind our back: none to revoke
		return nil, errRequeue
	}
	if err != nil {
		return nil, err
	}
	a.rev = resp.Header.Revision
	if !resp.Succeeded {
		// The key exists: a retried transaction whose first try was
		// applied (the lease is ours, so is the key: a spare is kept only
		// after its key was deleted). Rare: it is read apart, not in an
		// Else branch that every transaction would carry.
		a.rev = 0
		resp, err = a.l.cli.Txn(ctx).Then(clientv3.OpGet(a.key), a.queueOp()).Commit()
		if err != nil {
			return nil, err
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil, errRequeue // our key is gone already (revoked)
		}
		a.rev = kvs[0].CreateRevision
	}
	q := resp.Responses[1].GetResponseRange()
	if len(q.Kvs) == 0 {
		return nil, errRequeue // our key is gone already (revoked)
	}
	if resp.Succeeded && a.permits == 0 {
		// Our key is the newest (created by this transaction): the
		// second newest is the predecessor, and when the range holds
		// the whole queue, the others are every key below ours.
		if p := q.Kvs; len(p) >= 2 && p[0].CreateRevision == a.rev {
			a.pred, a.predSeen = p[1], resp.Header.Revision
			if q.Count == int64(len(p)) {
				a.below = make(map[string]int64, len(p)-1)
				for _, kv := range p[1:] {
					a.below[string(kv.Key)] = kv.CreateRevision
				}
			}
		}
	}
	return q, nil
}

// enqueueOps are enqueue's operations when our key is absent: create it
// and read what decides the grant: a lock's newest keys, ours (the
// newest: this transaction creates it), the predecessor, which is there
// if and only if ours is not the lowest, and the keys below it up to
// maxBelow, with the count of the queue's keys, which says whether that
// was all of them (one range, keys only); a semaphore's queueOp.
func (a *attempt) enqueueOps() []clientv3.Op {
	put := clientv3.OpPut(a.key, a.value, clientv3.WithLease(a.id))
	if a.permits > 0 {
		return []clientv3.Op{put, a.queueOp()}
	}
	return []clientv3.Op{put, clientv3.OpGet(a.queue, newestOpts...)}
}

// newestOpts are the options of enqueueOps' range, made once (each
// option is a closure that an acquisition would otherwise allocate).
var newestOpts = []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
	clientv3.WithLimit(maxBelow + 1), clientv3.WithKeysOnly()}

// queueOp reads, after enqueue's transaction found our key there already
// (a retried transaction), what decides the grant: a lock's lowest key; and
// when it is absent too for a semaphore: every key of its queue, oldest
// first (ours is the newest), with the values that say their numbers of
// permits.
func (a *attempt) queueOp() clientv3.Op {
	if a.permits == 0 {
		return clientv3.OpGet(a.queue, clientv3.WithFirstCreate()...)
	}
	return clientv3.OpGet(a.queue, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
}

// aheadOp reads, in grantWaited's transaction, what decides a grant after
// waiting: a lock's lowest key, or a semaphore's N lowest (its keys only).
// (A count of the keys below ours would not do: etcd counts a range
// before it applies a create-revision filter.) Serializable: read from
// what the member has applied (see grantWaited).
func (a *attempt) aheadOp(serializable bool) clientv3.Op {
	var opts []clientv3.OpOption
	if a.permits == 0 {
		opts = clientv3.WithFirstCreate()
	} else {
		opts = []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
			clientv3.WithLimit(int64(a.permits)), clientv3.WithKeysOnly()}
	}
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	return clientv3.OpGet(a.queue, opts...)
}

// check is grantWaited's transaction: is our key there, with its create
// revision, and what is ahead of it. From a revision after (not 0), it is
// served by the member from what it has applied, if that is at after or
// later (see grantWaited), else it is a linearizable read.
func (a *attempt) check(ctx context.Context, after int64) (*clientv3.TxnResponse, error) {
	txn := func(serializable bool) (*clientv3.TxnResponse, error) {
		return a.l.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(a.aheadOp(serializable)).
			Commit()
	}
	if after > 0 {
		if resp, err := txn(true); err == nil && resp.Header.Revision >= after {
			return resp, nil
		}
	}
	return txn(false)
}

// admitted reports, from aheadOp's range, whether our key holds: it is
// the lowest of a lock's queue, or among the N lowest of a semaphore's.
func (a *attempt) admitted(r *etcdserverpb.RangeResponse) bool {
	for _, kv := range r.Kvs {
		if kv.CreateRevision == a.rev {
			return true
		}
	}
	return false
}

// abandon ends a cancelled or failed attempt with a fresh bounded context,
// leaving nothing behind when it returns: a key it made is deleted (its
// name is its etcd lease grant's alone, see keyOf) and its etcd lease
// kept as a spare (deleteKey); a delete that finds the key gone leaves the lease id
// alone (it expired or was revoked, and may be another client's by now);
// a lease in any other state (a transaction cancelled in flight may have
// made the key, a delete failed) is revoked, which deletes its key,
// before abandon returns: a later attempt must not find it in the queue.
func (a *attempt) abandon() {
	if a.id == 0 {
		return
	}
	id := a.id
	a.id = 0
	if a.rev != 0 {
		a.l.deleteKey(a.key, spare{id: id, tag: a.tag, ttl: a.ttl, renewed: a.renewed}, false)
		return
	}
	a.l.revoke(id)
}

// grant makes the lease of a granted attempt; at is its grant time (see
// lease.at).
func (a *attempt) grant(at time.Time) *lease {
	ls := &lease{l: a.l, id: a.id, tag: a.tag, key: a.key, rev: a.rev, ttl: a.ttl, at: at, renewed: a.renewed, lost: make(chan struct{})}
	ls.watch()
	return ls
}

// wait waits until every key below ours is gone. It renews the etcd
// lease every third of the TTL meanwhile. It returns errRequeue (after
// abandoning the attempt) when our key vanished.
//
// When enqueue read every key below ours (a.below), one watch covers
// them and our own key: the delete that leaves none of them, with no
// delete of ours up to it, proves the grant at that revision (no key
// below ours, none can be created there later, and ours there, with the
// etcd lease it lives under) without the read after the delete that a
// handoff's critical path otherwise carries. The price: the delete of a
// key ahead reaches every waiter behind it that watches this way, not
// only the next. Otherwise (a longer queue, a watch that broke) it
// watches only the predecessor (the key with the greatest create revision
// below ours), and checks the grant with a read after its delete.
func (a *attempt) wait(ctx context.Context) (driver.Lease, error) {
	tick := time.NewTicker(time.Duration(a.ttl) * time.Second / 3)
	defer tick.Stop()
	pause := func() error { return a.pause(ctx, tick.C) }
	if below := a.below; below != nil {
		a.below = nil
		gone, err := a.waitDelete(ctx, below, true, a.rev, tick.C)
		if err != nil {
			return nil, err
		}
		if gone > 0 {
			ls, _, err := a.grantWaited(ctx, gone, true)
			switch {
			case err == nil:
				return ls, nil
			case errors.Is(err, errRequeue) || ctx.Err() != nil:
				return nil, err
			}
			if err := pause(); err != nil {
				return nil, err
			}
			a.pred = nil // look again
		}
	}
	a.l.watcher.dropQueue(a.queue)
	// deleted: the revision from which the predecessor is gone (0: not
	// seen gone), so we are likely first: try the grant at once, and look
	// for a new predecessor only if a key below ours is still there (one
	// round trip from the release to the grant, not two).
	var deleted int64
	for {
		var pred *mvccpb.KeyValue
		var seen int64 // the revision at which pred was there
		switch {
		case deleted > 0:
		case a.pred != nil:
			pred, seen, a.pred = a.pred, a.predSeen, nil // enqueue read it
		default:
			resp, err := a.l.cli.Get(ctx, a.queue,
				append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(a.rev-1))...)
			if err != nil {
				if err := pause(); err != nil {
					return nil, err
				}
				continue
			}
			if len(resp.Kvs) > 0 {
				pred, seen = resp.Kvs[0], resp.Header.Revision
			}
		}
		if pred == nil {
			after := deleted
			deleted = 0
			ls, lowest, err := a.grantWaited(ctx, after, false)
			switch {
			case err == nil && lowest:
				return ls, nil
			case err == nil:
				// A key below ours appeared: wait for it.
			case errors.Is(err, errRequeue) || ctx.Err() != nil:
				return nil, err
			default:
				if err := pause(); err != nil {
					return nil, err
				}
			}
			continue
		}
		gone, err := a.waitDelete(ctx, map[string]int64{string(pred.Key): pred.CreateRevision}, false, seen, tick.C)
		if err != nil {
			return nil, err
		}
		deleted = gone
	}
}

// waitDelete waits until every key of set (name → create revision,
// each there at revision seen) is deleted, and with own until then that
// our key is not, renewing our lease on each tick. It returns a revision
// from which the set's keys are gone, or 0 when the watch broke (the
// caller looks again); with own, our key was still there at that
// revision, and its delete is errRequeue (the attempt abandoned). The
// watch is on the Locker's own watch stream (watcher.go), and starts at
// the current revision, not at a past one: etcd serves a watcher that
// starts in the past from its "unsynced" group, which it catches up every
// 100ms, and a queue's revision moves on between our look and the watch
// whenever it is busy, so a watch from the look's revision waited up to
// 100ms after the delete. The server's notice that the watch is created
// carries the revision after which it sees every event: when that is
// seen or earlier, the watch covers every revision since the keys were
// seen; otherwise a look finds a delete that came in between (a key gone,
// or its name reused by a later key). A delete at seen or before is of an
// earlier key of the same name (a spare etcd lease's keys share a name,
// keyOf). With own (the set is every key below ours), the watch is the
// Locker's kept watch of the whole queue, which the next wait takes up
// without creating one (watcher.watchQueue).
func (a *attempt) waitDelete(ctx context.Context, set map[string]int64, own bool, seen int64, tick <-chan time.Time) (goneAt int64, _ error) {
	if testBeforeWatch != nil {
		testBeforeWatch()
	}
	broken := func() (int64, error) {
		// No leader, a broken stream: pause a moment and look again.
		select {
		case <-time.After(50 * time.Millisecond):
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	names := make(map[string]bool, len(set))
	from, end := "", ""
	span := func(k string) {
		if from == "" || k < from {
			from = k
		}
		if k >= end {
			end = k + "\x00"
		}
	}
	for k := range set {
		names[k] = true
		span(k)
	}
	var dw *deleteWatch
	var err error
	if own {
		dw, err = a.l.watcher.watchQueue(a.queue, names, a.key, seen)
	} else {
		dw, err = a.l.watcher.watchDelete(from, end, names, seen)
	}
	if err != nil {
		return broken()
	}
	defer a.l.watcher.stop(dw)
	created := false
	for {
		select {
		case rev := <-dw.notes:
			switch {
			case rev == 0:
				return broken()
			case rev < 0:
				a.abandon()
				return 0, errRequeue
			case created:
				return rev, nil // the last delete
			}
			created = true
			if rev <= seen {
				continue // no revision unwatched since the keys were seen
			}
			gone, ownGone, at, err := a.look(ctx, set, own)
			switch {
			case err != nil:
				return 0, nil // look again
			case ownGone:
				a.abandon()
				return 0, errRequeue
			}
			a.l.watcher.forget(dw, gone, at)
		case <-tick:
			if err := a.keepAlive(ctx); err != nil {
				return 0, err
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// look reads, in one transaction, which keys of set (name → create
// revision) are gone (or were replaced by a later key of the same name),
// and with own whether our key is gone, at the revision at.
func (a *attempt) look(ctx context.Context, set map[string]int64, own bool) (gone []string, ownGone bool, at int64, _ error) {
	names := make([]string, 0, len(set)+1)
	ops := make([]clientv3.Op, 0, len(set)+1)
	for k := range set {
		names = append(names, k)
		ops = append(ops, clientv3.OpGet(k, clientv3.WithKeysOnly()))
	}
	if own {
		ops = append(ops, clientv3.OpGet(a.key, clientv3.WithKeysOnly()))
	}
	resp, err := a.l.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, false, 0, err
	}
	there := func(i int, rev int64) bool {
		kvs := resp.Responses[i].GetResponseRange().Kvs
		return len(kvs) > 0 && kvs[0].CreateRevision == rev
	}
	for i, k := range names {
		if !there(i, set[k]) {
			gone = append(gone, k)
		}
	}
	return gone, own && !there(len(names), a.rev), resp.Header.Revision, nil
}

// testBeforeWatch, set by a test only, runs before waitDelete's and
// watchAhead's watch starts (TestPredecessorGoneBeforeWatch,
// TestSemaphoreWaiterLeaseLostBeforeWatch).
var testBeforeWatch func()

// pause waits a moment after a failed call (no leader during an election,
// a member restarting), renewing the lease on the way (tick): a waiter
// keeps its place through a transient failure, and ctx bounds how long it
// tries.
func (a *attempt) pause(ctx context.Context, tick <-chan time.Time) error {
	select {
	case <-time.After(100 * time.Millisecond):
		return nil
	case <-tick:
		return a.keepAlive(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keepAlive renews our etcd lease while we wait; a lease that is gone
// sends the attempt back to the queue. Other failures are left to the
// next tick.
func (a *attempt) keepAlive(ctx context.Context) error {
	kctx, cancel := context.WithTimeout(ctx, time.Duration(a.ttl)*time.Second/3)
	defer cancel()
	start := time.Now()
	_, err := a.l.renewer.renew(kctx, a.id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		a.abandon()
		return errRequeue
	}
	if err == nil {
		a.renewed = start
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// grantWaited is the grant after waiting, which re-checks what waiting may
// have cost (Jepsen's etcd 3.4.3 finding: a lease that expired while its
// owner waited was still granted the lock): it renews the etcd lease (a
// lease that is gone fails) and, in one transaction, checks that our key
// still exists with its create revision and that it is the lowest of the
// queue — both requests in flight together, one round trip. Both must
// succeed: the key was there at the transaction, and its lease was alive
// at the renewal (an expired lease never comes back, and takes its keys
// with it), so the server holds both a whole TTL from the renewal's start,
// which is the grant time. A lease renewed within the reuse window (the
// spare second, spares.go) is not renewed again: the server holds it a whole TTL from
// now already, and our key, found by the transaction, says it was neither
// revoked nor expired. lowest is false when a key below ours appeared (the
// caller waits again).
//
// after, when not 0, is a revision from which the predecessor is known to
// be gone (its delete, seen by the watch): the transaction is then served
// by the member from what it has applied, without the leader's quorum
// check of a linearizable read (which waits for the raft loop, behind the
// disk writes in flight: the handoff's critical path), and its answer is
// taken only if it is of that revision or later. It proves the same: no
// key below ours at a revision after ours was created (none can be
// created below ours later), and our key there at a revision at least as
// late as the predecessor's delete, with a lease the renewal (or the
// spare second) proves alive. An answer from a member that lags is asked
// again of the leader.
//
// proven: the watch of every key below ours and of ours proved the grant
// at revision after (see wait): only the renewal is left, if due.
func (a *attempt) grantWaited(ctx context.Context, after int64, proven bool) (_ driver.Lease, lowest bool, _ error) {
	at := time.Now()
	var renewed chan error
	if at.Sub(a.renewed) >= reuseWindow(a.ttl) {
		renewed = make(chan error, 1)
		go func() {
			_, err := a.l.renewer.renew(ctx, a.id)
			renewed <- err
		}()
	}
	var resp *clientv3.TxnResponse
	var err error
	if !proven {
		resp, err = a.check(ctx, after)
	}
	if renewed != nil {
		if rerr := <-renewed; rerr != nil {
			if errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
				a.abandon()
				return nil, false, errRequeue
			}
			return nil, false, rerr
		}
		a.renewed = at
	}
	if err != nil {
		return nil, false, err
	}
	if proven {
		return a.grant(at), true, nil
	}
	if !resp.Succeeded {
		a.abandon()
		return nil, false, errRequeue
	}
	if !a.admitted(resp.Responses[0].GetResponseRange()) {
		return nil, false, nil
	}
	return a.grant(at), true, nil
}
