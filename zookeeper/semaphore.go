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

// waitPermit queues until fewer than N nodes are ahead of ours, N being
// the semaphore's permits.
//
// It watches the N nodes just ahead of ours (the window), not only the
// N-th ahead: with N = 2 and the queue [a, b, ours], a waiter that watched
// only a would miss b's release, after which it is among the 2 lowest.
// The window is enough: as long as its N nodes exist, N nodes are ahead of
// ours; so whenever fewer are, one of the window's is gone and its watch
// fired. When a node of the window goes, the window takes in the next node
// ahead from the listing (nodes ahead of ours can only leave, never
// arrive, so no listing is needed), whose watch is set in turn; when fewer
// than N are left, the permit is ours without another round trip. A
// release thus wakes at most the N waiters just behind the freed node,
// never the whole queue, and nothing but a release or a departure wakes a
// waiter (a child watch on the parent, as in Curator's
// InterProcessSemaphoreV2, fires at every arrival too).
func (a *attempt) waitPermit(ctx context.Context, below []queued) (driver.Lease, error) {
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
		if again, err := w.arm(ctx, names...); err != nil || again {
			if err != nil {
				return nil, err
			}
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
				}
			}
		}
	}
}
