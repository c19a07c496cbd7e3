package etcd

import (
	"errors"
	"runtime/metrics"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/layout"
)

// TestReleaseSparesReissuedLeaseKey: Release deletes its key by name
// alone, so no other attempt may ever have that name. Here our etcd lease
// ends behind our back (revoked), the server then issues its id again
// (a client names it on Grant), and another Locker's attempt queues under
// it; our Release must find no key of its own (ErrNotHeld) and leave the
// other attempt's key where it is. Named by the lease id alone, the two
// keys had one name, and a plain delete took the other owner's.
func TestReleaseSparesReissuedLeaseKey(t *testing.T) {
	ctx, s, prefix, _ := openFresh(t, "reissued")
	cli := newClient(t, s.Addr)
	ours := newLocker(cli, false, prefix)
	defer ours.Close()
	dl, err := ours.TryAcquire(ctx, driver.Request{Name: "n", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ls := dl.(*lease)
	if _, err := cli.Revoke(ctx, ls.id); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: int64(ls.id), TTL: 30}); err != nil {
		t.Fatal(err)
	}
	defer cli.Revoke(ctx, ls.id)
	theirs := keyOf(layout.EtcdQueue(prefix, "n"), ls.id, grantTag()) // their grant's
	if _, err := cli.Put(ctx, theirs, "other", clientv3.WithLease(ls.id)); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Release after our etcd lease ended: %v, want ErrNotHeld", err)
	}
	resp, err := cli.Get(ctx, theirs)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Errorf("the other attempt's key %s under the reissued lease id was deleted by our Release", theirs)
	}
}

// TestKeyNameReused: a Locker's successive lock uses of a name, on its
// one spare etcd lease, reuse one key name. The server keeps a deleted
// key in its index until a compaction, and every read of the queue walks
// through them: a name per attempt made each lock use's enqueue read
// slower than the last (BenchmarkLockUse's server CPU per use rose by a
// fifth every 2 000 uses).
func TestKeyNameReused(t *testing.T) {
	ctx, s, prefix, _ := openFresh(t, "reused")
	l := newLocker(newClient(t, s.Addr), false, prefix)
	defer l.Close()
	names := map[string]bool{}
	for range 20 {
		dl, err := l.TryAcquire(ctx, driver.Request{Name: "n", TTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		names[dl.(*lease).key] = true
		if err := dl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(names) != 1 {
		t.Errorf("20 lock uses on one spare etcd lease made %d key names, want 1", len(names))
	}
}

// TestNoGoroutinePerGrant: a lease reports its loss by callback
// (driver.LossNotifier), so the portable layer starts no goroutine per
// grant to wait on Lost (one per lock use, woken at each release: 200 in
// 200 uses without OnLost).
func TestNoGoroutinePerGrant(t *testing.T) {
	ctx, _, _, l := openFresh(t, "goroutines")
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	started := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	var before uint64
	for i := range 210 {
		if i == 10 { // streams open, a spare kept
			before = started()
		}
		ls, err := l.Acquire(ctx, "g", opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := started() - before; got > 20 {
		t.Errorf("%d goroutines started in 200 uncontended Acquire+Release, want none per grant", got)
	}
}
