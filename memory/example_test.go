package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memory"
)

// Code written against *dlock.Locker runs on mem:// in unit tests: two
// Lockers on one Namespace are two clients of one lock service.
func ExampleNewNamespace() {
	ctx := context.Background()
	ns := memory.NewNamespace()
	a, b := memory.OpenLocker(ns), memory.OpenLocker(ns)
	defer a.Close()
	defer b.Close()

	lease, _ := a.Acquire(ctx, "orders/42", nil)
	_, err := b.TryAcquire(ctx, "orders/42", nil)
	fmt.Println("b while a holds it:", errors.Is(err, dlock.ErrNotAcquired), "held:", ns.Held("orders/42"))
	lease.Release(ctx)
	next, _ := b.TryAcquire(ctx, "orders/42", nil)
	fmt.Println("b after a released it: token", next.Token())
	next.Release(ctx)
	// Output:
	// b while a holds it: true held: true
	// b after a released it: token 2
}

// Revoke drops a holder's lease as a failing server would, so that a test
// can check what the code does when its lock is lost: the lease's context
// ends and Err says why.
func ExampleNamespace_Revoke() {
	ctx := context.Background()
	ns := memory.NewNamespace()
	l := memory.OpenLocker(ns)
	defer l.Close()

	err := dlock.Do(ctx, l, "reports/daily", &dlock.AcquireOptions{TTL: time.Minute}, func(ctx context.Context, lease *dlock.Lease) error {
		ns.Revoke("reports/daily") // the server loses the lock mid-job
		<-ctx.Done()               // the job sees it and stops
		return lease.Err()
	})
	fmt.Println(errors.Is(err, dlock.ErrLockLost))
	// Output: true
}

// Waiters counts the clients queued on a name, for tests of fairness and
// hand-off.
func ExampleNamespace_Waiters() {
	ctx := context.Background()
	ns := memory.NewNamespace()
	a, b := memory.OpenLocker(ns), memory.OpenLocker(ns)
	defer a.Close()
	defer b.Close()

	lease, _ := a.Acquire(ctx, "deploy", nil)
	got := make(chan uint64)
	go func() {
		next, _ := b.Acquire(ctx, "deploy", nil)
		got <- next.Token()
		next.Release(ctx)
	}()
	for ns.Waiters("deploy") == 0 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("waiters:", ns.Waiters("deploy"))
	lease.Release(ctx)
	fmt.Println("handed to the waiter with token", <-got)
	// Output:
	// waiters: 1
	// handed to the waiter with token 2
}
