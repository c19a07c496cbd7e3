package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memory"
)

func ExampleOpen() {
	ctx := context.Background()
	// mem:// is the in-process driver; in production this URL names a real
	// backend, e.g. "redis://127.0.0.1:6379/0" with the redis package imported.
	l, err := dlock.Open(ctx, "mem://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	fmt.Println(l.Capabilities().Backend, l.Capabilities().Fencing)
	// Output: memory true
}

func ExampleLocker_Acquire() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, _ := dlock.Open(ctx, "mem://")
	defer l.Close()

	lease, err := l.Acquire(ctx, "orders/42", &dlock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)
	// Send the token with every write to the protected resource, which
	// rejects tokens lower than the highest it has seen.
	fmt.Println("holding", lease.Name(), "with token", lease.Token())
	// Output: holding orders/42 with token 1
}

func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	ns := memory.NewNamespace()
	a, b := memory.OpenLocker(ns), memory.OpenLocker(ns) // two clients
	defer a.Close()
	defer b.Close()

	lease, _ := a.TryAcquire(ctx, "nightly-report", nil)
	_, err := b.TryAcquire(ctx, "nightly-report", nil)
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))

	lease.Release(ctx)
	again, err := b.TryAcquire(ctx, "nightly-report", nil)
	fmt.Println(err, again.Token())
	again.Release(ctx)
	// Output:
	// true
	// <nil> 2
}

func ExampleDo() {
	ctx := context.Background()
	l, _ := dlock.Open(ctx, "mem://")
	defer l.Close()

	err := dlock.Do(ctx, l, "migrations", nil, func(ctx context.Context, lease *dlock.Lease) error {
		// ctx ends if the lease is lost; the lock is released when this returns.
		fmt.Println("migrating under token", lease.Token())
		return nil
	})
	fmt.Println(err)
	// Output:
	// migrating under token 1
	// <nil>
}

func ExampleLease_Done() {
	ctx := context.Background()
	ns := memory.NewNamespace()
	l := memory.OpenLocker(ns)
	defer l.Close()

	lease, _ := l.Acquire(ctx, "leader", nil)
	ns.Revoke("leader") // the server drops the lease (a fault)

	select {
	case <-lease.Done():
		fmt.Println(errors.Is(lease.Err(), dlock.ErrLockLost))
	case <-time.After(5 * time.Second):
		fmt.Println("still held")
	}
	// Output: true
}
