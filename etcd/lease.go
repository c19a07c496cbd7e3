package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/driver"
)

// lease is one grant: our key, its create revision (the token) and the
// etcd lease it lives under.
type lease struct {
	l   *locker
	id  clientv3.LeaseID
	tag uint64 // drawn at the etcd lease's grant (keyOf)
	key string
	rev int64
	ttl int64 // seconds
	// at is the grant time: a local time from which the server holds the
	// etcd lease a whole TTL at least (the start of the grant or renewal
	// that began it, or with the spare second a later one, spares.go).
	at time.Time

	lost     chan struct{}
	lostOnce sync.Once

	mu       sync.Mutex
	released bool
	onLost   func()             // OnLost's callback, until the lease is lost or released
	renewed  time.Time          // start of the etcd lease's last renewal (at, then Refresh's)
	timer    *time.Timer        // starts the watch on our key
	cancel   context.CancelFunc // ends the watch once it started
}

var (
	_ driver.Lease        = (*lease)(nil)
	_ driver.Granted      = (*lease)(nil)
	_ driver.LossNotifier = (*lease)(nil)
)

func (ls *lease) Token() uint64         { return uint64(ls.rev) }
func (ls *lease) GrantedAt() time.Time  { return ls.at }
func (ls *lease) Lost() <-chan struct{} { return ls.lost }
func (ls *lease) String() string        { return ls.key }

// markLost closes Lost and calls OnLost's callback, unless the lease was
// released first.
func (ls *lease) markLost() {
	ls.lostOnce.Do(func() {
		close(ls.lost)
		ls.mu.Lock()
		f := ls.onLost
		ls.onLost = nil
		ls.mu.Unlock()
		if f != nil {
			go f()
		}
	})
}

// OnLost calls f in a goroutine of its own when the lease is lost, never
// once it is released (driver.LossNotifier): the portable layer then
// starts no goroutine per grant to wait on Lost, and wakes none at each
// release.
func (ls *lease) OnLost(f func()) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case ls.released:
	case ls.lostErr() != nil: // markLost took onLost before f was set
		go f()
	default:
		ls.onLost = f
	}
}

// watchAfter is how long a lease is held before its key is watched: a
// lock held for less (most are) costs no watch, and one held longer learns
// of a loss behind its back (a revoke, a deleted key) from the watch
// within watchAfter plus a round trip, or from the next refresh (a third
// of the TTL) at the latest. Safety does not rest on it: Done closes at
// the local deadline whatever the watch sees. It was a millisecond, which
// made every lock held a few milliseconds (a handoff's holder) open and
// cancel a watch: a tenth of a second keeps the notice of a loss prompt
// at the cost of no request for the short holds.
const watchAfter = 100 * time.Millisecond

// watch reports the lease lost as soon as our key is deleted behind our
// back (the etcd lease expired or was revoked, an operator deleted it):
// earlier than the next refresh would. It starts after watchAfter, and
// watches from the revision after our create, so a delete before the
// watch starts is not missed. Its context is made when it starts: a lease
// released sooner (most are) costs a timer only.
func (ls *lease) watch() {
	ls.timer = time.AfterFunc(watchAfter, func() {
		ls.mu.Lock()
		if ls.released {
			ls.mu.Unlock()
			return
		}
		ctx, cancel := context.WithCancel(ls.l.closing)
		ls.cancel = cancel
		ls.mu.Unlock()
		ls.watchKey(ctx)
	})
}

// stopWatch ends the watch, or keeps it from starting (the lease is
// released: ls.released is set).
func (ls *lease) stopWatch() {
	ls.timer.Stop()
	ls.mu.Lock()
	cancel := ls.cancel
	ls.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// watchKey is watch's goroutine.
func (ls *lease) watchKey(ctx context.Context) {
	ls.l.mu.Lock()
	if ls.l.closed || ctx.Err() != nil {
		ls.l.mu.Unlock()
		return
	}
	ls.l.wg.Add(1)
	ls.l.mu.Unlock()
	func() {
		defer ls.l.wg.Done()
		rev := ls.rev + 1
		for ctx.Err() == nil {
			wch := ls.l.cli.Watch(ctx, ls.key, clientv3.WithRev(rev), clientv3.WithFilterPut())
			for wr := range wch {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						ls.markLost()
						return
					}
				}
			}
			if ctx.Err() != nil {
				return
			}
			// The watch broke (compaction, a lost stream): is the key
			// still ours? Then watch again from now.
			gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := ls.l.cli.Get(gctx, ls.key)
			gcancel()
			switch {
			case err != nil:
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
			case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != ls.rev:
				ls.markLost()
				return
			default:
				rev = resp.Header.Revision + 1
			}
		}
	}()
}

// Refresh renews the etcd lease (the Locker's keep-alive stream: the server holds it a whole
// TTL from now) and checks that our key is still there: a lease that is
// gone, or a key deleted behind our back, is ErrNotHeld.
func (ls *lease) Refresh(ctx context.Context, ttl time.Duration) error {
	ls.mu.Lock()
	released := ls.released
	ls.mu.Unlock()
	if released {
		return fmt.Errorf("etcd: %w", driver.ErrNotHeld)
	}
	if err := ls.lostErr(); err != nil {
		return err
	}
	octx, cancel := ls.l.op(ctx)
	defer cancel()
	err := ls.refresh(octx, ttl)
	if err != nil {
		// The key's deletion, seen by the watch while the renewal was in
		// flight (the portable layer then cancels ctx), is the answer.
		if lerr := ls.lostErr(); lerr != nil {
			return lerr
		}
	}
	return ls.l.wrapErr(ctx, err)
}

// lostErr is ErrNotHeld once the watch saw our key deleted.
func (ls *lease) lostErr() error {
	select {
	case <-ls.lost:
		return fmt.Errorf("etcd: key %s was deleted: %w", ls.key, driver.ErrNotHeld)
	default:
		return nil
	}
}

// refresh is Refresh's work; its errors lack the package prefix. The
// renewal and the read of our key go in the Locker's next batch of
// refreshes (refresh.go), in flight together: the key there with our
// create revision, and the etcd lease alive at the renewal (an expired
// lease never comes back, and takes its keys with it), is the lock held a
// whole TTL from the renewal's start.
func (ls *lease) refresh(octx context.Context, ttl time.Duration) error {
	c, err := ls.l.refresher.refresh(octx, ls)
	if err != nil {
		return err
	}
	if errors.Is(c.renewErr, rpctypes.ErrLeaseNotFound) {
		ls.markLost()
		return fmt.Errorf("lease %x: %w", int64(ls.id), driver.ErrNotHeld)
	}
	if c.renewErr != nil {
		return c.renewErr
	}
	if got := time.Duration(c.ttl) * time.Second; got < ttl {
		return fmt.Errorf("refresh by %v: the etcd lease lasts %v: %w", ttl, got, driver.ErrUnsupported)
	}
	ls.mu.Lock()
	if c.start.After(ls.renewed) {
		ls.renewed = c.start
	}
	ls.mu.Unlock()
	if c.readErr != nil {
		return c.readErr
	}
	if c.kv == nil || c.kv.CreateRevision != ls.rev {
		ls.markLost()
		return fmt.Errorf("key %s is gone: %w", ls.key, driver.ErrNotHeld)
	}
	return nil
}

// Release deletes our key, then keeps the etcd lease, alive and without
// keys, as a spare for the next acquisition (spares.go). The delete is a
// plain one, the floor's and concurrency.Mutex's (a transaction that
// compares the create revision first costs the server more: a read view
// and the compare before the write): our key's name is our etcd lease
// grant's alone (keyOf: no attempt under another lease, or under this
// lease id reissued, has it), and that lease's attempts come one at a
// time, so whatever the delete finds is our key, and no other owner's key
// is ever touched. A delete that finds no key (our etcd lease expired or
// was revoked, the key was deleted) leaves the lease id alone: it may be
// another client's lease by now. One whose outcome is unknown is tried
// again in the background (Close waits for it), and the lease is then not
// reused: the first delete may still be applied later.
//
// The delete runs on ctx, not on one that Close also cancels (op): the
// portable layer releases with a bounded context, and releases every
// lease before it closes the driver, so Close never waits for a release;
// a context per release would cost allocations and a lock that every
// release of the Locker shares.
func (ls *lease) Release(ctx context.Context) error {
	ls.mu.Lock()
	ls.released = true
	ls.onLost = nil
	renewed := ls.renewed
	ls.mu.Unlock()
	ls.stopWatch()
	resp, err := ls.l.cli.Delete(ctx, ls.key)
	sp := spare{id: ls.id, tag: ls.tag, ttl: ls.ttl, renewed: renewed}
	switch {
	case err != nil:
		if !ls.l.background(func() { ls.l.deleteKey(ls.key, sp, true) }) {
			ls.l.deleteKey(ls.key, sp, true)
		}
		return ls.l.wrapErr(ctx, err)
	case resp.Deleted == 0:
		return fmt.Errorf("etcd: key %s is gone: %w", ls.key, driver.ErrNotHeld)
	}
	ls.l.spares.put(sp)
	return nil
}

// deleteKey deletes key, an attempt's key under the etcd lease of sp,
// with a fresh bounded context. When it deletes the key (sp was alive and
// ours then) it keeps sp as a spare, or with retire (an earlier delete of
// key had an unknown outcome, and may yet be applied to the next
// attempt's key of the same name) revokes it. A delete that fails revokes
// sp's lease (which deletes the key); one that finds no key leaves it
// alone.
func (l *locker) deleteKey(key string, sp spare, retire bool) {
	ctx, cancel := cleanupCtx()
	resp, err := l.cli.Delete(ctx, key)
	cancel()
	switch {
	case err != nil || resp.Deleted == 1 && retire:
		l.revoke(sp.id)
	case resp.Deleted == 1:
		l.spares.put(sp)
	}
}
