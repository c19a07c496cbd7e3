package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redis"
)

// A lock on one Redis server, opened by URL.
func Example() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	lease, err := l.Acquire(ctx, "orders/42", &dlock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Pass lease.Token() to the resource, which rejects older tokens.
	log.Printf("holding orders/42 with token %d", lease.Token())
}

// TLS, an ACL user and a key prefix of the application's own.
func Example_tls() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "rediss://app:secret@cache.internal:6380/2?prefix=billing:&dial_timeout=2s")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
}

// A Redis Cluster: the lock's keys are hash-tagged to one slot and
// waiters are woken by sharded pub/sub.
func Example_cluster() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "redis+cluster://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(ctx, "reports/nightly", nil)
	if err != nil {
		log.Fatal(err) // errors.Is(err, dlock.ErrNotAcquired) when another holds it
	}
	defer lease.Release(ctx)
}

// Redlock over three independent masters, 20ms per node and request.
func Example_redlock() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379?node_timeout=20ms")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	lease, err := l.Acquire(ctx, "deploy/prod", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	<-lease.Done() // closes if the quorum is lost; Redlock tokens do not fence
}

// A client the application already has; closing the Locker leaves it open.
func ExampleOpenLocker() {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	l, err := redis.OpenLocker(client, &redis.Options{Prefix: "myapp:"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
}

// Redlock over clients of one's own.
func ExampleOpenRedlock() {
	var nodes []goredis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		nodes = append(nodes, goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}
	l, err := redis.OpenRedlock(nodes, &redis.Options{NodeTimeout: 20 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
}

// Stock deduction, fenced on the resource side: the decrement applies only
// if no newer holder of the lock has written to the stock since, so a
// holder that was paused past its lease cannot deduct twice.
func ExampleFencedIncrBy() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	err = dlock.Do(ctx, l, "stock/sku-1", nil, func(ctx context.Context, lease *dlock.Lease) error {
		left, ok, err := redis.FencedIncrBy(ctx, rdb, "stock:sku-1", lease.Token(), "qty", -1)
		switch {
		case err != nil:
			return err
		case !ok:
			return errors.New("a newer holder has written: this lease is stale")
		}
		log.Printf("%d left", left)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Anti-duplicate submission on Redis: the request id is the lock name; a
// second submit of the same request while the first runs is refused at
// once (dlock.ErrNotAcquired) instead of being processed twice.
func Example_antiDuplicateSubmission() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	submit := func(ctx context.Context, requestID string, process func(context.Context) error) error {
		lease, err := l.TryAcquire(ctx, "submit/"+requestID, &dlock.AcquireOptions{TTL: 30 * time.Second})
		if errors.Is(err, dlock.ErrNotAcquired) {
			return fmt.Errorf("request %s is already being processed", requestID)
		}
		if err != nil {
			return err
		}
		defer lease.Release(ctx)
		ctx, cancel := lease.Context(ctx) // ends if the lease is lost
		defer cancel()
		return process(ctx)
	}
	_ = submit(ctx, "req-7f3a", func(ctx context.Context) error { return nil })
}

// Rate limiting on Redis: at most two reports render at once across every
// host, with two named locks as slots.
func Example_rateLimit() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	const slots = 2
	for i := range slots {
		lease, err := l.TryAcquire(ctx, fmt.Sprintf("render/slot-%d", i), nil)
		if errors.Is(err, dlock.ErrNotAcquired) {
			continue // that slot is busy: try the next
		}
		if err != nil {
			log.Fatal(err)
		}
		defer lease.Release(ctx)
		log.Printf("rendering in slot %d", i)
		return
	}
	log.Printf("%d renders already run: try later", slots)
}
