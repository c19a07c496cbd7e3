package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// TestRefreshesShareAPipeline: the refreshes of a Locker's leases that
// come together go to each server in one pipeline (one batch), and each
// lease gets its own answer: the lease whose key was deleted behind its
// back is not held (and its key is not re-created), every other one is
// extended to the new TTL.
func TestRefreshesShareAPipeline(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		drv := openDriver(t, ctx, tg)
		var f *refresher
		switch d := drv.(type) {
		case *locker:
			f = d.refresher
		case *redlock:
			f = d.refresher
		}
		const n, lost = 40, 7
		leases := make([]driver.Lease, n)
		names := make([]string, n)
		for i := range leases {
			names[i] = uniqueName(t)
			var err error
			if leases[i], err = drv.TryAcquire(ctx, driver.Request{Name: names[i], TTL: 10 * time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tg.del(ctx, keysFor(DefaultPrefix, names[lost]).lock); err != nil {
			t.Fatal(err)
		}
		before := f.sent.Load()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, ls := range leases {
			wg.Go(func() { errs[i] = ls.Refresh(ctx, 30*time.Second) })
		}
		wg.Wait()
		if batches := f.sent.Load() - before; batches > n/4 {
			t.Errorf("%d concurrent refreshes went in %d batches, want a few", n, batches)
		}
		for i, err := range errs {
			key := keysFor(DefaultPrefix, names[i]).lock
			if i == lost {
				if !errors.Is(err, driver.ErrNotHeld) {
					t.Errorf("refresh of the deleted lease: %v, want ErrNotHeld", err)
				}
				if m, _ := tg.del(ctx, key); m != 0 {
					t.Errorf("the refresh re-created the deleted key on %d servers", m)
				}
				continue
			}
			if err != nil {
				t.Errorf("refresh of lease %d: %v", i, err)
				continue
			}
			for _, c := range tg.raw {
				if pttl, err := c.PTTL(ctx, key).Result(); err != nil || pttl <= 10*time.Second {
					t.Errorf("lease %d after its refresh to 30s: PTTL %v, %v", i, pttl, err)
				}
			}
		}
		for i, ls := range leases {
			if i != lost {
				if err := ls.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		}
	})
}

// TestRefreshAfterClose: a refresh sent after its Locker's Close fails,
// and Close does not wait for it.
func TestRefreshAfterClose(t *testing.T) {
	ctx := testCtx(t)
	tg := singleTarget(t)
	drv, err := openURL(ctx, tg.url)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := drv.TryAcquire(ctx, driver.Request{Name: uniqueName(t), TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := ls.Refresh(rctx, 10*time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refresh after Close: %v, want the closed client's error at once", err)
	}
}
