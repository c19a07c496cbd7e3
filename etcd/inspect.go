package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/layout"
)

// Inspect reads the holder (the queue's lowest create revision: its owner
// and fencing token) and the number of keys behind it in one transaction,
// then the time left on the holder's etcd lease.
func (l *locker) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := l.enter(); err != nil {
		return driver.Info{}, err
	}
	defer l.wg.Done()
	octx, cancel := l.op(ctx)
	defer cancel()
	q := layout.EtcdQueue(l.prefix, name)
	resp, err := l.cli.Txn(octx).Then(
		clientv3.OpGet(q, clientv3.WithFirstCreate()...),
		clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return driver.Info{}, l.wrapErr(ctx, err)
	}
	first := resp.Responses[0].GetResponseRange().Kvs
	if len(first) == 0 {
		return driver.Info{}, nil
	}
	h := first[0]
	info := driver.Info{
		Held:    true,
		Owner:   string(h.Value),
		Fence:   uint64(h.CreateRevision),
		Waiters: int(max(resp.Responses[1].GetResponseRange().Count-1, 0)),
	}
	if h.Lease != 0 {
		t, err := l.cli.TimeToLive(octx, clientv3.LeaseID(h.Lease))
		if err != nil {
			return driver.Info{}, l.wrapErr(ctx, err)
		}
		if t.TTL > 0 {
			info.TTL = time.Duration(t.TTL) * time.Second
		}
	}
	return info, nil
}
