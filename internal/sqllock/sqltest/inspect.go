package sqltest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Inspect checks Locker.Inspect (dlock status) on one strategy: a free
// lock is not held; a holder with an Owner is reported held with that
// owner and its token as the last fence; a session waiting in the
// server's queue is counted (strategies that wait in one); and once the
// last holder has released, the lock is free and its fence, where the
// strategy still knows it, is that holder's token.
func Inspect(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holder, waiter, op := Open(t, ctx, rawURL), Open(t, ctx, rawURL), Open(t, ctx, rawURL)
	caps := op.Capabilities()
	name := fmt.Sprintf("inspect/%s/%d", caps.Strategy, time.Now().UnixNano())
	inspect := func(when string) dlock.Info {
		t.Helper()
		info, err := op.Inspect(ctx, name)
		if err != nil {
			t.Fatalf("%s: inspect: %v", when, err)
		}
		return info
	}

	if info := inspect("never taken"); info.Held || info.Owner != "" {
		t.Errorf("never taken: %+v, want not held", info)
	}
	const owner, ttl = "inspect-host/4242", 10 * time.Second
	la, err := holder.Acquire(ctx, name, &dlock.AcquireOptions{TTL: ttl, Owner: owner})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	info := inspect("held")
	if !info.Held || info.Owner != owner || info.Fence != la.Token() {
		t.Errorf("held: %+v, want held by %q with fence %d", info, owner, la.Token())
	}
	if info.TTL < 0 || info.TTL > ttl {
		t.Errorf("held: TTL %v, want unknown (0) or within %v", info.TTL, ttl)
	}
	queue := caps.Wait == driver.WaitQueue
	if queue && info.Waiters != 0 {
		t.Errorf("held, nobody waiting: %d waiters, want 0", info.Waiters)
	}
	if !queue && info.Waiters != -1 {
		t.Errorf("held, no server queue: %d waiters, want -1 (unknown)", info.Waiters)
	}

	got := make(chan *dlock.Lease, 1)
	go func() {
		lb, err := waiter.Acquire(ctx, name, &dlock.AcquireOptions{TTL: ttl, Owner: "inspect-waiter/1"})
		if err != nil && ctx.Err() == nil {
			t.Errorf("waiting acquire: %v", err)
		}
		got <- lb
	}()
	if queue {
		deadline := time.Now().Add(15 * time.Second)
		for info = inspect("waited for"); info.Waiters != 1; info = inspect("waited for") {
			if time.Now().After(deadline) || len(got) > 0 {
				t.Fatalf("waited for: %+v, want 1 waiter", info)
			}
			// Slower than 10/s: MariaDB refreshes its snapshot of
			// information_schema.INNODB_TRX and INNODB_LOCK_WAITS only
			// when it has not been read for 0.1s.
			time.Sleep(150 * time.Millisecond)
		}
		if !info.Held || info.Owner != owner || info.Fence != la.Token() {
			t.Errorf("waited for: %+v, want held by %q with fence %d", info, owner, la.Token())
		}
	} else {
		time.Sleep(100 * time.Millisecond)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	lb := <-got
	if lb == nil {
		return
	}
	if info := inspect("held by the waiter"); !info.Held || info.Owner != "inspect-waiter/1" || info.Fence != lb.Token() {
		t.Errorf("held by the waiter: %+v, want held by %q with fence %d", info, "inspect-waiter/1", lb.Token())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	info = inspect("released")
	if info.Held || info.Owner != "" || info.TTL != 0 {
		t.Errorf("released: %+v, want not held", info)
	}
	if info.Fence != 0 && info.Fence != lb.Token() {
		t.Errorf("released: fence %d, want the last holder's %d (or 0: unknown)", info.Fence, lb.Token())
	}
}
