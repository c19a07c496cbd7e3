package bench

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdSemFloorNote says what etcd's semaphore floor sends.
const etcdSemFloorNote = "grant an etcd lease of the TTL; one transaction: put-if-absent of <semaphore>/<lease id> under " +
	"that lease and a read of the semaphore's N lowest create revisions (held when the key's own is among them; " +
	"the token is that create revision); a waiter watches the prefix for deletes from the read's revision and " +
	"reads again; delete the key (the lease is revoked off the path): 3 round trips uncontended"

// etcdSemFloor is etcd's semaphore floor on one client: the lock floor's
// recipe (etcd.go) with the N lowest create revisions holding instead of
// the lowest, and a watch of the prefix to wait. Permits are granted in
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
	g, err := f.cli.Grant(ctx, f.ttl)
	if err != nil {
		return nil, err
	}
	q := f.prefix + "/" + etcdEscape.Replace(name) + "/"
	key := fmt.Sprintf("%s%016x", q, int64(g.ID))
	lowest := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
		clientv3.WithLimit(int64(f.permits)), clientv3.WithKeysOnly()}
	resp, err := f.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "", clientv3.WithLease(g.ID)), clientv3.OpGet(q, lowest...)).
		Commit()
	if err != nil {
		f.revokeLater(g.ID) // the key, if it was made, goes with it
		return nil, err
	}
	if !resp.Succeeded { // a fresh lease's key cannot exist
		f.revokeLater(g.ID)
		return nil, fmt.Errorf("bench: etcd semaphore floor: key %s already exists", key)
	}
	mine := resp.Header.Revision // the key's create revision
	held := &etcdFloorHeld{f: f.etcdFloor, key: key, lease: g.ID, token: uint64(mine)}
	kvs, seen := resp.Responses[1].GetResponseRange().Kvs, resp.Header.Revision
	for {
		for _, kv := range kvs {
			if kv.CreateRevision == mine {
				return held, nil
			}
		}
		// Wait for a delete under the prefix after the read, then read
		// again.
		wctx, cancel := context.WithCancel(ctx)
		wch := f.cli.Watch(wctx, q, clientv3.WithPrefix(), clientv3.WithRev(seen+1), clientv3.WithFilterPut())
		var werr error
		select {
		case wr, ok := <-wch:
			if !ok {
				werr = ctx.Err()
			} else {
				werr = wr.Err()
			}
		case <-ctx.Done():
			werr = ctx.Err()
		}
		cancel()
		var r *clientv3.GetResponse
		if werr == nil {
			r, werr = f.cli.Get(ctx, q, lowest...)
		}
		if werr != nil {
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), etcdCleanupTimeout)
			_ = held.Release(cctx)
			ccancel()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, werr
		}
		kvs, seen = r.Kvs, r.Header.Revision
	}
}

func (f *etcdSemFloor) FailedAttempts() uint64 { return 0 } // a watch
func (f *etcdSemFloor) Close() error           { return f.close() }
