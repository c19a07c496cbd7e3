package bench

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdSemFloorNote says what etcd's semaphore floor sends.
const etcdSemFloorNote = "an etcd lease of the TTL, reused as the lock floor's (etcd.go); one transaction: put-if-absent of " +
	"<semaphore>/<lease id>-<tag> under that lease and a read of the semaphore's N lowest create revisions (held when the " +
	"key's own is among them; the token is that create revision); a waiter watches the prefix for deletes and reads again " +
	"after each (once the watch is confirmed, then after every delete); delete the key: 2 round trips uncontended"

// etcdSemFloor is etcd's semaphore floor on one client: the lock floor's
// recipe (etcd.go) with the N lowest create revisions holding instead of
// the lowest, and a watch of the prefix's deletes to wait. Permits are granted in
// create-revision order, a key holding only once fewer than N keys below
// it remain, so the tokens strictly increase across grants.
type etcdSemFloor struct {
	*etcdFloor
	permits int
}

func openEtcdSemFloor(ctx context.Context, serverURL string, permits int) (Client, error) {
	cli, err := dialEtcd(ctx, Target{Name: "etcd semaphore floor", URL: serverURL})
	if err != nil {
		return nil, err
	}
	f := &etcdFloor{cli: cli, prefix: "/dlockbench-semfloor", ttl: etcdTTLSeconds(),
		revoke: make(chan clientv3.LeaseID, 4096), done: make(chan struct{})}
	go f.revoker()
	return &etcdSemFloor{etcdFloor: f, permits: permits}, nil
}

// etcdCleanupTimeout bounds deleting the key of a cancelled wait.
const etcdCleanupTimeout = 5 * time.Second

func (f *etcdSemFloor) Acquire(ctx context.Context, name string) (Held, error) {
	sp, err := f.lease(ctx)
	if err != nil {
		return nil, err
	}
	q := f.prefix + "/" + etcdEscape.Replace(name) + "/"
	key := fmt.Sprintf("%s%016x-%016x", q, int64(sp.id), sp.tag)
	lowest := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
		clientv3.WithLimit(int64(f.permits)), clientv3.WithKeysOnly()}
	resp, err := f.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "", clientv3.WithLease(sp.id)), clientv3.OpGet(q, lowest...)).
		Commit()
	if err != nil {
		f.revokeLater(sp.id) // the key, if it was made, goes with it
		return nil, err
	}
	if !resp.Succeeded { // a deleted key's name: it cannot exist
		f.revokeLater(sp.id)
		return nil, fmt.Errorf("bench: etcd semaphore floor: key %s already exists", key)
	}
	mine := resp.Header.Revision // the key's create revision
	held := &etcdFloorHeld{f: f.etcdFloor, key: key, lease: sp, token: uint64(mine)}
	if etcdHolds((*clientv3.GetResponse)(resp.Responses[1].GetResponseRange()), mine) {
		return held, nil
	}
	fail := func(err error) (Held, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), etcdCleanupTimeout)
		_ = held.Release(cctx)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	// One watch of the prefix's deletes from the current revision (a watch
	// from a past revision waits in etcd's unsynced group, caught up every
	// 100 ms), and a read once it is confirmed: a delete before the read
	// is in the read, one after it comes as an event.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := f.cli.Watch(wctx, q, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	for first := true; ; first = false {
		wr, ok := <-wch
		if !ok {
			return fail(ctx.Err())
		}
		if err := wr.Err(); err != nil {
			return fail(err)
		}
		if !first && len(wr.Events) == 0 {
			continue // a progress notification
		}
		r, err := f.cli.Get(ctx, q, lowest...)
		if err != nil {
			return fail(err)
		}
		if etcdHolds(r, mine) {
			return held, nil
		}
	}
}

// etcdHolds reports whether the key created at revision mine is among
// the N lowest create revisions r lists.
func etcdHolds(r *clientv3.GetResponse, mine int64) bool {
	for _, kv := range r.Kvs {
		if kv.CreateRevision == mine {
			return true
		}
	}
	return false
}

func (f *etcdSemFloor) FailedAttempts() uint64 { return 0 } // a watch
func (f *etcdSemFloor) Close() error           { return f.close() }
