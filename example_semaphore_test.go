package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memory"
)

// Rate limiting: at most 2 exports run at once against a fragile API, out
// of 5 jobs, whichever processes run them (on a real backend every process
// opens the same URL and names the same semaphore with the same number).
func ExampleSemaphore() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "mem://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	exports, err := l.Semaphore("exports", 2)
	if err != nil {
		fmt.Println(err)
		return
	}

	var running, most atomic.Int32
	export := func(ctx context.Context, job int, token uint64) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		// Call the API here with ctx, which ends if the permit is lost;
		// token fences writes as a lock's does.
		time.Sleep(10 * time.Millisecond)
		return nil
	}

	var wg sync.WaitGroup
	for job := 1; job <= 5; job++ {
		wg.Go(func() {
			// Do waits for one of the 2 permits, runs the export holding
			// it, and gives it back.
			err := exports.Do(ctx, nil, func(ctx context.Context, permit *dlock.Lease) error {
				return export(ctx, job, permit.Token())
			})
			if err != nil {
				fmt.Println("export", job, err)
			}
		})
	}
	wg.Wait()
	if most.Load() > 2 {
		fmt.Println("more than 2 exports ran at once")
	}
	fmt.Println("5 exports done, at most 2 at a time")
	// Output: 5 exports done, at most 2 at a time
}

func ExampleSemaphore_TryAcquire() {
	ctx := context.Background()
	ns := memory.NewNamespace()
	a, b := memory.OpenLocker(ns), memory.OpenLocker(ns) // two clients
	defer a.Close()
	defer b.Close()

	workers, _ := a.Semaphore("workers", 2)
	first, _ := workers.TryAcquire(ctx, nil)
	second, _ := workers.TryAcquire(ctx, nil)
	fmt.Println("tokens", first.Token(), second.Token())

	theirs, _ := b.Semaphore("workers", 2)
	_, err := theirs.TryAcquire(ctx, nil)
	fmt.Println("all taken:", errors.Is(err, dlock.ErrNotAcquired))

	// Another number for the same semaphore is refused while it is in
	// use: two configurations cannot silently apply two limits.
	wrong, _ := b.Semaphore("workers", 3)
	_, err = wrong.TryAcquire(ctx, nil)
	fmt.Println(errors.Is(err, dlock.ErrInvalidOption), err)

	first.Release(ctx)
	third, err := theirs.TryAcquire(ctx, nil)
	fmt.Println(err, third.Token())
	second.Release(ctx)
	third.Release(ctx)
	// Output:
	// tokens 1 2
	// all taken: true
	// true dlock: try-acquire semaphore "workers": memory: 2 permits while in use, not 3: invalid option
	// <nil> 3
}
