package etcd

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestSpares: a released lease's etcd lease is the next acquisition's (no
// grant, no revoke on the lock's path); at most maxSpares are kept per TTL
// however many leases were released at once; Close revokes every one.
func TestSpares(t *testing.T) {
	s := testenv.NewEtcd(t, nil)
	ctx := testenv.Context(t, time.Minute)
	prefix := fmt.Sprintf("/dlocktest/spares-%d", time.Now().UnixNano())
	l, err := dlock.Open(ctx, s.URL+prefix)
	if err != nil {
		t.Fatal(err)
	}
	opts := &dlock.AcquireOptions{TTL: 3 * time.Second}

	// One name, acquired and released in turn: one etcd lease throughout.
	seen := map[string]bool{}
	for range 5 {
		ls, err := l.Acquire(ctx, "a", opts)
		if err != nil {
			t.Fatal(err)
		}
		seen[holderLease(t, ctx, s.Addr, layout.EtcdQueue(prefix, "a"))] = true
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 1 {
		t.Errorf("5 acquisitions in turn used %d etcd leases, want 1 (the spare): %v", len(seen), seen)
	}

	// 3 × maxSpares leases at once, then all released: at most maxSpares
	// stay on the server.
	var wg sync.WaitGroup
	leases := make([]*dlock.Lease, 3*maxSpares)
	for i := range leases {
		wg.Go(func() {
			ls, err := l.Acquire(ctx, fmt.Sprint("n", i), opts)
			if err != nil {
				t.Error(err)
				return
			}
			leases[i] = ls
		})
	}
	wg.Wait()
	for _, ls := range leases {
		if ls != nil {
			_ = ls.Release(ctx)
		}
	}
	waitLeases(t, ctx, s.Addr, maxSpares, "after releasing 3 × maxSpares leases")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, ctx, s.Addr, 0, "after Close")
}

// holderLease returns the etcd lease (its decimal id) of queue's first key.
func holderLease(t *testing.T, ctx context.Context, addr, queue string) string {
	t.Helper()
	kvs := rangeKeys(t, ctx, addr, queue)
	if len(kvs) != 1 || kvs[0].Lease == "" {
		t.Fatalf("queue %s: %+v, want one key under a lease", queue, kvs)
	}
	return kvs[0].Lease
}

// waitLeases waits up to 5s until the server has at most n leases.
func waitLeases(t *testing.T, ctx context.Context, addr string, n int, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var r struct {
			Leases []struct {
				ID string `json:"ID"`
			} `json:"leases"`
		}
		if err := testenv.EtcdCall(ctx, addr, "/v3/lease/leases", map[string]any{}, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Leases) <= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the server has %d leases, want at most %d", when, len(r.Leases), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
