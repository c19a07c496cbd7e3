package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/layout"
)

// MaxPermits is the largest semaphore this driver keeps
// (Capabilities.MaxPermits). It bounds what an attempt reads: every
// acquisition of a semaphore reads the whole queue (the holders and the
// waiters, with their values) in the transaction that creates its key.
const MaxPermits = 256

// newAttempt starts one attempt on req's lock, or on a permit of req's
// semaphore.
func (l *locker) newAttempt(req driver.Request) *attempt {
	a := &attempt{l: l, queue: layout.EtcdQueue(l.prefix, req.Name), value: req.Owner, ttl: ttlSeconds(req.TTL)}
	if req.Permits > 0 {
		a.permits = req.Permits
		a.queue = layout.EtcdSemaphoreQueue(l.prefix, req.Name)
		a.value = strconv.Itoa(req.Permits) + "\n" + req.Owner
	}
	return a
}

// permitsOf reads the number of permits from a semaphore key's value (0:
// not one of ours).
func permitsOf(value []byte) int {
	n, _, ok := strings.Cut(string(value), "\n")
	if !ok {
		return 0
	}
	p, err := strconv.Atoi(n)
	if err != nil || p < 1 {
		return 0
	}
	return p
}

// holds decides, from enqueue's range q, whether the attempt holds: a
// lock's key is the lowest (q holds the queue's lowest key, or our key and
// the predecessor if there is one: ours is there and none below it); a
// semaphore's has fewer than N keys ahead. A
// semaphore's attempt that finds a key ahead with another number of
// permits is refused (ErrInvalidOption): every key ahead counts, not only
// the holders', because an attempt that passed this check saw every key
// ahead of its own, so two keys with different numbers that both passed
// never exist at once. Clients that disagree on N while they overlap may
// all be refused.
func (a *attempt) holds(name string, q *etcdserverpb.RangeResponse) (bool, error) {
	if a.permits == 0 {
		ours := false
		for _, kv := range q.Kvs {
			if kv.CreateRevision < a.rev {
				return false, nil
			}
			ours = ours || kv.CreateRevision == a.rev
		}
		return ours, nil
	}
	ahead := 0
	for _, kv := range q.Kvs {
		if kv.CreateRevision >= a.rev {
			continue
		}
		ahead++
		if n := permitsOf(kv.Value); n != 0 && n != a.permits {
			return false, fmt.Errorf("semaphore %q has %d permits while in use, not %d: %w", name, n, a.permits, driver.ErrInvalidOption)
		}
	}
	return ahead < a.permits, nil
}

// waitPermit waits until fewer than N keys are ahead of ours in the
// semaphore's queue. One watch of the whole queue tells it of every
// deletion; it counts only those of the keys ahead of ours, which it read
// once the watch was confirmed (keys ahead can only leave, never arrive: a
// later key has a later create revision), and tries the grant when fewer
// than N are left: grantWaited renews the etcd lease and re-checks, on the
// server, that our key is still there with fewer than N keys ahead. Each
// release wakes every waiter of the semaphore (each gets the event), but
// costs a round trip only to those it may admit. The etcd lease is renewed
// every third of the TTL meanwhile.
func (a *attempt) waitPermit(ctx context.Context) (driver.Lease, error) {
	tick := time.NewTicker(time.Duration(a.ttl) * time.Second / 3)
	defer tick.Stop()
	for {
		ls, err := a.watchAhead(ctx, tick.C)
		if ls != nil || err != nil {
			return ls, err
		}
		if err := a.pause(ctx, tick.C); err != nil {
			return nil, err
		}
	}
}

// watchAhead is one watch of waitPermit's. It returns neither a lease nor
// an error when the watch broke or a call failed (the caller pauses and
// watches again). As in waitDelete, the watch starts at the current
// revision, not a past one (which etcd serves from its unsynced group,
// caught up every 100ms), and the keys ahead are read once the server has
// confirmed it: a deletion before the read is in the read, one after it
// is an event after the read's revision.
func (a *attempt) watchAhead(ctx context.Context, tick <-chan time.Time) (driver.Lease, error) {
	if testBeforeWatch != nil {
		testBeforeWatch()
	}
	wctx, cancel := a.l.waitCtx(ctx)
	defer cancel()
	wch := a.l.cli.Watch(wctx, a.queue, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	var (
		ahead map[string]bool // nil until read
		read  int64           // the read's revision
	)
	for {
		if ahead != nil && len(ahead) < a.permits {
			ls, admitted, err := a.grantWaited(ctx, 0, false)
			switch {
			case err == nil && admitted:
				return ls, nil
			case errors.Is(err, errRequeue) || ctx.Err() != nil:
				return nil, err
			}
			return nil, nil // a failed call, or keys ahead we did not know of: look again
		}
		select {
		case wr, ok := <-wch:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !ok || wr.Err() != nil {
				return nil, nil
			}
			if wr.Created {
				// The keys ahead, and our own: a deletion of ours
				// before the watch started is no event of it (the
				// waiter would learn it at its next renewal only).
				g, err := a.l.cli.Get(ctx, a.queue, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(a.rev), clientv3.WithKeysOnly())
				if err != nil {
					return nil, nil
				}
				ahead, read = make(map[string]bool, len(g.Kvs)), g.Header.Revision
				own := false
				for _, kv := range g.Kvs {
					if string(kv.Key) == a.key {
						own = true
						continue
					}
					ahead[string(kv.Key)] = true
				}
				if !own {
					a.abandon()
					return nil, errRequeue
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision <= read {
					continue
				}
				if string(ev.Kv.Key) == a.key {
					// Our own key went (its etcd lease expired or was
					// revoked): queue again with a new one.
					a.abandon()
					return nil, errRequeue
				}
				delete(ahead, string(ev.Kv.Key))
			}
		case <-tick:
			if err := a.keepAlive(ctx); err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
