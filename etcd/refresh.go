package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/batch"
)

// refresher batches the refreshes of a Locker's leases. A refresh is a
// renewal of the lease's etcd lease and a read of its key; alone, it cost
// the client about 200 µs of CPU (1 000 leases at a TTL of 3s, each
// refreshed every second: a fifth of a core), nearly all of it in the
// two requests' system calls (a write and a read each) and in the
// goroutine wakes around them, not in the work of the messages. So the
// refreshes that come within batch.Window of each other go together: the
// renewals in one write on the keep-alive stream, the reads of the keys in
// one read-only transaction (one linearizable read on the server), both in
// flight together.
//
// Safety is unchanged: a refresh's renewal starts when its batch is sent,
// not before, and that start is what the lease records (lease.renewed),
// while the portable layer measures its deadline from the start of the
// call, which is earlier: the server holds the etcd lease longer than the
// deadline assumes. What a batch costs is the wait for it: a refresh
// answers up to batch.Window later.
type refresher struct {
	l     *locker
	batch batch.Batcher[*refreshCall] // Send: r.sendBatch
}

// refreshCall is one lease's refresh in a batch, and its outcome.
type refreshCall struct {
	ls       *lease
	deadline time.Time // of the caller's context; zero: none
	done     chan struct{}

	start    time.Time // when the batch was sent
	ttl      int64     // the renewal's answer
	renewErr error     // the renewal's error (rpctypes.ErrLeaseNotFound: gone)
	kv       *mvccpb.KeyValue
	readErr  error // the read of the key failed (kv unknown)
}

// maxRefreshBatch is the most keys one transaction reads: etcd's default
// limit of operations per transaction (--max-txn-ops).
const maxRefreshBatch = 128

// refresh renews ls's etcd lease and reads its key, in the next batch; it
// returns the call with its outcome, or ctx's error.
func (r *refresher) refresh(ctx context.Context, ls *lease) (*refreshCall, error) {
	c := &refreshCall{ls: ls, done: make(chan struct{})}
	c.deadline, _ = ctx.Deadline()
	r.batch.Add(c, batch.Window(time.Duration(ls.ttl)*time.Second))
	select {
	case <-c.done:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// sendBatch sends a batch in a goroutine that Close waits for.
func (r *refresher) sendBatch(calls []*refreshCall) {
	if !r.l.background(func() { r.send(calls) }) {
		for _, c := range calls {
			c.renewErr = errClosed
			close(c.done)
		}
	}
}

// send renews the calls' etcd leases and reads their keys, both requests
// in flight together, and answers each call. Its context ends with the
// Locker, or at the latest of the callers' deadlines (a caller that gives
// up earlier returns on its own).
func (r *refresher) send(calls []*refreshCall) {
	ctx, cancel := r.l.closing, context.CancelFunc(func() {})
	var latest time.Time
	for _, c := range calls {
		if c.deadline.IsZero() {
			latest = time.Time{}
			break
		}
		if c.deadline.After(latest) {
			latest = c.deadline
		}
	}
	if !latest.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, latest)
	}
	defer cancel()
	start := time.Now()
	ids := make([]clientv3.LeaseID, len(calls))
	ops := make([]clientv3.Op, len(calls))
	for i, c := range calls {
		ids[i] = c.ls.id
		ops[i] = clientv3.OpGet(c.ls.key, clientv3.WithKeysOnly())
	}
	renewals := r.l.renewer.send(ids...)
	resp, err := r.l.cli.Txn(ctx).Then(ops...).Commit()
	for i, c := range calls {
		c.start = start
		c.ttl, c.renewErr = awaitRenewal(ctx, renewals[i])
		switch {
		case err != nil:
			c.readErr = err
		default:
			if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
				c.kv = kvs[0]
			}
		}
		close(c.done)
	}
}
