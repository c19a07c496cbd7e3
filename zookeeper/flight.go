package zookeeper

import (
	"context"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// refreshGather is how long the refreshes that share a round trip gather
// before it is sent: with 1 000 leases refreshed every 10s (the default
// TTL), about 5 share one.
const refreshGather = 50 * time.Millisecond

// flights sends the round trips that refreshes share (lease.Refresh): a
// sync, sent after every refresh that waits for it began. One goroutine
// sends them one after another while refreshes wait, and ends when none
// does.
type flights struct {
	mu   sync.Mutex
	next *flight // the round trip that refreshes join; nil: none yet
	busy bool    // the goroutine runs
}

// flight is one shared round trip: done closes when its reply was read
// (err: its error).
type flight struct {
	done chan struct{}
	err  error
}

// await returns nil once a sync sent after await was called has had its
// reply read: on this connection, whatever the server had processed before
// it, the events of the watches included, has then reached the Locker (see
// lease.Refresh). It returns ctx's error or errStopped (stop closed) as
// soon as they come.
func (fs *flights) await(ctx context.Context, conn *zk.Conn, stop <-chan struct{}) error {
	fs.mu.Lock()
	f := fs.next
	if f == nil {
		f = &flight{done: make(chan struct{})}
		fs.next = f
	}
	if !fs.busy {
		fs.busy = true
		go fs.fly(conn)
	}
	fs.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return errStopped
	}
}

// fly sends the flights while refreshes join them.
func (fs *flights) fly(conn *zk.Conn) {
	for {
		time.Sleep(refreshGather)
		fs.mu.Lock()
		f := fs.next
		fs.next = nil
		if f == nil {
			fs.busy = false
			fs.mu.Unlock()
			return
		}
		fs.mu.Unlock()
		// Taken from next before it is sent: every refresh that joined it
		// began before the sync.
		_, f.err = conn.Sync("/")
		close(f.done)
	}
}
