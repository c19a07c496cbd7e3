package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/zookeeper"
)

// Open a Locker by URL: one session to the ensemble, locks under /myapp.
// (Not run: it needs a ZooKeeper server.)
func Example() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "zk://127.0.0.1:2181,127.0.0.2:2181,127.0.0.3:2181/myapp?session_timeout=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	lease, err := l.Acquire(ctx, "orders/42", nil) // queues fairly until granted
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// The token is the lock node's czxid: pass it to the resource you
	// protect, which must refuse writes carrying a lower one.
	fmt.Println("fencing token", lease.Token())
	select {
	case <-lease.Done(): // the session expired or may have: stop writing
		log.Print(lease.Err())
	default:
	}
}

// Use a connection the application already has. Handing over the event
// channel lets the Locker notice a broken connection at once; the session
// timeout bounds how long a lease survives it.
func ExampleOpenLocker() {
	conn, events, err := zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close() // Locker.Close leaves conn open

	l, err := zookeeper.OpenLocker(conn, &zookeeper.Options{
		Prefix:         "/myapp/locks",
		SessionTimeout: 10 * time.Second,
		Events:         events,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if lease, err := l.TryAcquire(ctx, "nightly-report", nil); err == nil {
		defer lease.Release(ctx)
		// ... the job ...
	}
}

// Cron once across hosts on ZooKeeper: every host runs the schedule; the
// host that takes the run's lock does the job and records it, the others
// skip it. (dlock run -no-wait NAME -- CMD does this for any command.)
func Example_cronOnce() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "zk://127.0.0.1:2181/cron")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	run := "nightly-report/" + time.Now().UTC().Format("2006-01-02")
	lease, err := l.TryAcquire(ctx, run, nil)
	if errors.Is(err, dlock.ErrNotAcquired) {
		return // another host is running it
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Run the job with the context of lease.Context(ctx), which ends if the session is
	// lost, and record that this run is done (with lease.Token()) before
	// releasing, so that a slow host does not run it again.
}
