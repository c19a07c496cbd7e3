package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The semaphore waiters' watch stream. The client multiplexes every watch
// whose context carries the same gRPC metadata on one stream, and closes
// that stream when its last watch ends: a semaphore's waiter, which
// watches the queue only while it waits, opened a new gRPC stream (an
// HTTP/2 stream, the server's two goroutines and the client's three) and
// tore it down at every wait. So while a Locker has waited once, it keeps
// one more watch open on the waiters' stream (WithRequireLeader, as
// theirs): a watch of the prefix key itself, under which dlock writes
// nothing, whose events the server filters out anyway. It ends with the
// stream (a broken stream, no leader), and the next wait opens it again;
// Close ends it. (A lock's waiters watch on the Locker's own stream,
// watcher.go.)

// waitCtx is the context of a semaphore waiter's watch: ctx, requiring a leader,
// on the kept stream.
func (l *locker) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	l.keepWatchStream()
	return context.WithCancel(clientv3.WithRequireLeader(ctx))
}

// keepWatchStream opens the keeping watch unless it is open.
func (l *locker) keepWatchStream() {
	l.wmu.Lock()
	if l.watchKept {
		l.wmu.Unlock()
		return
	}
	l.watchKept = true
	l.wmu.Unlock()
	ctx := clientv3.WithRequireLeader(l.closing)
	wch := l.cli.Watch(ctx, l.prefix, clientv3.WithFilterPut(), clientv3.WithFilterDelete())
	if !l.background(func() {
		for range wch {
		}
		l.wmu.Lock()
		l.watchKept = false
		l.wmu.Unlock()
	}) {
		l.wmu.Lock()
		l.watchKept = false
		l.wmu.Unlock()
	}
}
