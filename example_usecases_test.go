package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	_ "github.com/dlock-go/dlock/memory"
)

// inventory is a resource that takes fencing tokens: it applies a write
// only if the writer's token is not older than the last one it applied,
// as postgres.FencedUpdate, mysql.FencedUpdate and redis.FencedIncrBy do
// on a real store.
type inventory struct {
	mu    sync.Mutex
	stock int
	fence uint64
}

var errStale = errors.New("stale fencing token: a newer holder has written")

func (inv *inventory) deduct(token uint64, n int) error {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if token < inv.fence {
		return errStale
	}
	inv.fence = token
	inv.stock -= n
	return nil
}

// Stock deduction: each deduction runs under the item's lock and carries
// the lease's fencing token to the store. A holder that was paused past its
// lease (a GC pause, a stopped VM) and wakes up after another holder has
// deducted cannot deduct a second time: its token is older.
func Example_stockDeduction() {
	ctx := context.Background()
	l, _ := dlock.Open(ctx, "mem://shop") // e.g. "redis://127.0.0.1:6379/0"
	defer l.Close()
	inv := &inventory{stock: 10}

	// Holder A takes the lock with a short lease and no keep-alive, then
	// stalls past it.
	a, _ := l.TryAcquire(ctx, "stock/sku-1", &dlock.AcquireOptions{TTL: 50 * time.Millisecond, NoKeepAlive: true})
	<-a.Done()
	fmt.Println("A's lease:", a.Err() != nil)

	// Holder B gets the lock and deducts.
	b, _ := l.Acquire(ctx, "stock/sku-1", nil)
	fmt.Println("B deducts:", inv.deduct(b.Token(), 1))
	b.Release(ctx)

	// A wakes up and tries to deduct with its old token.
	fmt.Println("A deducts:", inv.deduct(a.Token(), 1))
	fmt.Println("stock:", inv.stock)
	// Output:
	// A's lease: true
	// B deducts: <nil>
	// A deducts: stale fencing token: a newer holder has written
	// stock: 9
}

// Anti-duplicate submission: the request id is the lock name, and a
// submit takes it with TryAcquire. A second submit of the same request
// while the first runs is refused at once instead of being processed
// twice.
func Example_antiDuplicateSubmission() {
	ctx := context.Background()
	l, _ := dlock.Open(ctx, "mem://")
	defer l.Close()

	submit := func(requestID string) (*dlock.Lease, error) {
		lease, err := l.TryAcquire(ctx, "submit/"+requestID, &dlock.AcquireOptions{TTL: 30 * time.Second})
		if errors.Is(err, dlock.ErrNotAcquired) {
			return nil, fmt.Errorf("request %s is already being processed", requestID)
		}
		return lease, err
	}

	first, err := submit("req-7f3a")
	fmt.Println("first submit:", err)
	_, err = submit("req-7f3a") // a double click, a client retry
	fmt.Println("second submit:", err)
	first.Release(ctx) // the first one is done
	again, err := submit("req-7f3a")
	fmt.Println("after it finished:", err)
	again.Release(ctx)
	// Output:
	// first submit: <nil>
	// second submit: request req-7f3a is already being processed
	// after it finished: <nil>
}

// Rate limiting: at most N jobs of a kind run at once across every host,
// with N named locks as slots (a job takes the first free slot).
func Example_rateLimit() {
	ctx := context.Background()
	l, _ := dlock.Open(ctx, "mem://")
	defer l.Close()
	const slots = 2

	start := func(job string) (*dlock.Lease, bool) {
		for i := range slots {
			lease, err := l.TryAcquire(ctx, fmt.Sprintf("render/slot-%d", i), nil)
			if err == nil {
				fmt.Printf("%s runs in slot %d\n", job, i)
				return lease, true
			}
		}
		fmt.Printf("%s waits: %d jobs already run\n", job, slots)
		return nil, false
	}

	a, _ := start("job-a")
	b, _ := start("job-b")
	start("job-c")
	a.Release(ctx)
	c, _ := start("job-c")
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// job-a runs in slot 0
	// job-b runs in slot 1
	// job-c waits: 2 jobs already run
	// job-c runs in slot 0
}

// Cron once across hosts: every host runs the same schedule, and each run
// is done by whichever host takes the run's lock first; the others skip
// it. The holder records that the run is done before it releases, so a
// slow host that takes the lock later skips it too. (The dlock command
// does this for any command: dlock run NAME -- CMD.)
func Example_cronOnce() {
	ctx := context.Background()
	run := "nightly-report/2026-11-24" // one lock per scheduled run
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := map[string]string{} // the job's own record of finished runs
	for _, host := range []string{"host-a", "host-b", "host-c"} {
		wg.Go(func() {
			l, _ := dlock.Open(ctx, "mem://cron") // e.g. "zk://zk1:2181/locks"
			defer l.Close()
			lease, err := l.TryAcquire(ctx, run, &dlock.AcquireOptions{TTL: time.Minute})
			if errors.Is(err, dlock.ErrNotAcquired) {
				return // another host is running it
			}
			defer lease.Release(ctx)
			mu.Lock()
			defer mu.Unlock()
			if _, ok := done[run]; ok {
				return // a host ran it already
			}
			done[run] = host // the job runs here, then records the run
		})
	}
	wg.Wait()
	fmt.Println("runs done:", len(done))
	// Output: runs done: 1
}
