package zookeeper

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/layout"
)

// MaxPermits is the largest semaphore this driver keeps
// (Capabilities.MaxPermits). It bounds what a waiter costs: it watches the
// MaxPermits nodes just ahead of it, set in one pipelined batch, and every
// attempt that is not alone lists the parent, whose children's names
// (about 60 bytes each) must fit ZooKeeper's 1MB packet limit along with
// the waiters'.
const MaxPermits = 256

// semParent returns the znode of the semaphore name: the parent of its
// permits, apart from the lock name's (see layout.ZooKeeperSemaphoreParent).
func (l *locker) semParent(name string) string {
	return layout.ZooKeeperSemaphoreParent(l.cfg.prefix, name)
}

// checkPermits refuses a semaphore's attempt whose listing shows a node
// ahead of ours with another number of permits. Every node ahead counts,
// not only the holders: a node that this check let pass was created after
// every node ahead of it and looked at all of them, so two nodes with
// different numbers that both passed can never exist at once (the later
// one would have seen the earlier one) and the number of permits of a
// semaphore in use is that of all its admitted nodes. A node ahead that
// is itself about to be refused may refuse ours too: clients that
// disagree on N while they overlap may all be refused.
func (a *attempt) checkPermits(name string, v view) error {
	if a.permits == 0 {
		return nil
	}
	for _, q := range v.below {
		if q.permits != 0 && q.permits != a.permits {
			return fmt.Errorf("semaphore %q has %d permits while in use, not %d: %w", name, q.permits, a.permits, driver.ErrInvalidOption)
		}
	}
	return nil
}

// testWaitPermit, when set (benchmarks only, before any Locker is
// opened), replaces waitPermit's window with another design to compare.
var testWaitPermit func(ctx context.Context, a *attempt) (driver.Lease, error)

// waitPermit queues until fewer than N nodes are ahead of ours, N being
// the semaphore's permits.
//
// It watches the N nodes just ahead of ours (the window), not only the
// N-th ahead: with N = 2 and the queue [a, b, ours], a waiter that watched
// only a would miss b's release, after which it is among the 2 lowest.
// The window is enough: as long as its N nodes exist, N nodes are ahead of
// ours; so whenever fewer are, one of the window's is gone and its watch
// fired. When a node of the window goes and fewer than N are left, the
// permit is ours without another round trip (nodes ahead of ours can only
// leave, never arrive); otherwise the queue is listed again and the new
// window's missing watches set in one batch (the old listing's next node
// ahead has usually gone too, and walking it node by node cost a round
// trip each: 27 getData per grant with 32 clients, against 3 now). A
// release thus wakes at most the N waiters just behind the freed node,
// never the whole queue, and nothing but a departure wakes a waiter (a
// child watch on the parent, as in Curator's
// InterProcessSemaphoreV2, fires at every arrival too).
func (a *attempt) waitPermit(ctx context.Context, below []queued) (driver.Lease, error) {
	if testWaitPermit != nil {
		return testWaitPermit(ctx, a)
	}
	n := a.permits
	w := &queueWatch{a: a, below: below, watched: make(map[string]<-chan zk.Event)}
	var (
		names []string
		cases []reflect.SelectCase
	)
	for {
		if len(w.below) < n {
			return a.grantWaited(ctx, w.czxid, w.own)
		}
		names = names[:0]
		for _, q := range w.below[len(w.below)-n:] {
			names = append(names, q.name)
		}
		again, err := w.arm(ctx, names...)
		if err != nil {
			return nil, err
		}
		if again {
			// A node of the window had gone: nodes further ahead, which
			// would enter it next, may have gone too (holders come and go
			// while we queue). Walking the listing one stale node at a
			// time costs a round trip each; one listing costs one.
			if w.below, err = a.relist(ctx); err != nil {
				return nil, err
			}
			a.l.waitRelists.Add(1)
			continue
		}
		cases = append(cases[:0],
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.own)})
		for _, name := range names {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.watched[name])})
		}
		chosen, v, _ := reflect.Select(cases)
		var ev zk.Event
		if chosen > 0 {
			ev, _ = v.Interface().(zk.Event)
		}
		switch chosen {
		case 0:
			return nil, ctx.Err()
		case 1:
			if err := w.ownEvent(ev); err != nil {
				return nil, err
			}
		default:
			name := names[chosen-2]
			delete(w.watched, name)
			if err := notWatching(ev); err != nil {
				return nil, err
			}
			if ev.Type == zk.EventNodeDeleted {
				w.below = slices.DeleteFunc(w.below, func(q queued) bool { return q.name == name })
				if len(w.below) < n {
					a.l.fastGrants.Add(1)
				} else {
					// The next node ahead enters the window: list again
					// (see above) rather than trust the old listing.
					a.l.waitRelists.Add(1)
					var err error
					if w.below, err = a.relist(ctx); err != nil {
						return nil, err
					}
				}
			}
		}
	}
}
