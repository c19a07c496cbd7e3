package etcd

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestRefreshBatch: the refreshes of a Locker's leases that come together
// go in one batch (a read of every key in one transaction, not a read
// each), and each lease gets its own answer: of 20 leases refreshed at
// once, the one whose key was deleted behind its back and the one whose
// etcd lease was revoked are not held, the 18 others are.
func TestRefreshBatch(t *testing.T) {
	const n = 20
	ctx, s, prefix, l := openFresh(t, "refresh")
	opts := &dlock.AcquireOptions{TTL: 30 * time.Second}
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		var err error
		if leases[i], err = l.Acquire(ctx, fmt.Sprint("n", i), opts); err != nil {
			t.Fatal(err)
		}
	}
	const deleted, revoked = 3, 11
	kv := func(i int) queueKV {
		kvs := rangeKeys(t, ctx, s.Addr, layout.EtcdQueue(prefix, fmt.Sprint("n", i)))
		if len(kvs) != 1 {
			t.Fatalf("queue of n%d: %d keys, want 1", i, len(kvs))
		}
		return kvs[0]
	}
	del := map[string]string{"key": base64.StdEncoding.EncodeToString(kv(deleted).Key)}
	if err := testenv.EtcdCall(ctx, s.Addr, "/v3/kv/deleterange", del, nil); err != nil {
		t.Fatal(err)
	}
	if err := testenv.EtcdCall(ctx, s.Addr, "/v3/lease/revoke", map[string]string{"ID": kv(revoked).Lease}, nil); err != nil {
		t.Fatal(err)
	}

	before := etcdRequests(t, s.Addr)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, ls := range leases {
		wg.Go(func() { errs[i] = ls.Refresh(ctx) })
	}
	wg.Wait()
	after := etcdRequests(t, s.Addr)
	for i, err := range errs {
		switch i {
		case deleted, revoked:
			if !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("refresh of n%d, its key gone: %v, want ErrNotHeld", i, err)
			}
		default:
			if err != nil {
				t.Errorf("refresh of n%d: %v", i, err)
			}
		}
	}
	// Without the batch: a Range per refresh. A batch may split on the
	// timer (a refresh that comes just after one is sent), rarely twice.
	if reads := after["Range"] + after["Txn"] - before["Range"] - before["Txn"]; reads > 3 {
		t.Errorf("%d refreshes read their keys in %v requests, want one batch (at most 3)", n, reads)
	}
	for i, ls := range leases {
		if i != deleted && i != revoked {
			if err := ls.Release(context.WithoutCancel(ctx)); err != nil {
				t.Error(err)
			}
		}
	}
}
