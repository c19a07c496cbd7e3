package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcd"
)

// Open a Locker by URL: one client to the cluster, locks under /myapp.
// (Not run: it needs an etcd server.)
func Example() {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "etcd://127.0.0.1:2379,127.0.0.2:2379,127.0.0.3:2379/myapp")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	lease, err := l.Acquire(ctx, "orders/42", &dlock.AcquireOptions{TTL: 10 * time.Second}) // queues fairly until granted
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// The token is the create revision of the lock's key: pass it to the
	// resource you protect, which must refuse writes carrying a lower one.
	fmt.Println("fencing token", lease.Token())
	select {
	case <-lease.Done(): // the etcd lease was lost or may have expired: stop writing
		log.Print(lease.Err())
	default:
	}
}

// Use a client the application already has (Locker.Close leaves it open).
func ExampleOpenLocker() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	l, err := etcd.OpenLocker(cli, &etcd.Options{Prefix: "/myapp"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "nightly-report", nil)
	if err != nil {
		log.Fatal(err) // errors.Is(err, dlock.ErrNotAcquired): someone else runs it
	}
	defer lease.Release(ctx)
}
