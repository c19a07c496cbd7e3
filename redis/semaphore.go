package redis

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
)

// Counting semaphores on a single server or a Cluster (see doc.go,
// Semaphores): a sorted set of holders scored by lease expiry on the
// server's clock, one script per operation.
var (
	//go:embed semaphore_acquire.lua
	semAcquireLua string
	//go:embed semaphore_refresh.lua
	semRefreshLua string
	//go:embed semaphore_release.lua
	semReleaseLua string

	semAcquireScript = newScript(semAcquireLua)
	semRefreshScript = newScript(semRefreshLua)
	semReleaseScript = newScript(wakeLua + semReleaseLua)
)

// Argument lists of the semaphore scripts.
const (
	semAcquireArgc = 14 // evalsha, digest, numkeys, 5 keys, 6 arguments
	semReleaseArgc = 11 // evalsha, digest, numkeys, 4 keys, 4 arguments
	semRefreshArgc = 8  // evalsha, digest, numkeys, 3 keys, 2 arguments
)

// MaxPermits is the largest number of permits of a semaphore on a single
// server or a Cluster. Every operation on a semaphore is logarithmic in its
// number of holders (a sorted set), and its keys grow by about 100 bytes
// per holder: 65536 holders are a few megabytes on one slot's master, and
// a test fills a semaphore of MaxPermits permits.
const MaxPermits = 1 << 16

// newSemHub makes the wake-up hub of the Locker's semaphores: Redlock's
// hub (a registry of waiting Lockers per name, a channel per Locker), on
// one pub/sub connection for a single server, or one per watched slot in a
// Cluster with sharded pub/sub.
func (l *locker) newSemHub() *hub {
	return newHub(
		func(ctx context.Context, channel string) ([]string, error) {
			if l.cluster == nil {
				return []string{""}, nil
			}
			cmd, err := l.publishCommand(ctx)
			if err != nil {
				return nil, err
			}
			if cmd != "SPUBLISH" {
				return []string{""}, nil
			}
			return []string{strconv.Itoa(keySlot(channel))}, nil
		},
		func(key string) (*goredis.PubSub, bool) {
			switch {
			case l.cluster == nil:
				return l.client.Subscribe(context.Background()), false
			case key != "":
				return l.cluster.SSubscribe(context.Background()), true
			}
			return l.cluster.Subscribe(context.Background()), false
		},
		func(ctx context.Context, k keys, id string) { _ = l.client.ZRem(ctx, k.queue, id).Err() },
		nil,
	)
}

// Watch tells a semaphore's waiter that a permit may be free: a release
// publishes to the Locker's channel when the Locker is registered as
// waiting (see semAcquire). Locks wait in the grant queue (Acquire)
// instead: a lock's Watch fails, and the caller would poll.
func (l *locker) Watch(ctx context.Context, req driver.Request) (<-chan struct{}, func(), error) {
	if req.Permits == 0 {
		return nil, nil, fmt.Errorf("redis: watch: %w: locks wait in the grant queue", driver.ErrUnsupported)
	}
	return l.semHub.watch(ctx, l.sems.get(req.Name))
}

// semAcquire is TryAcquire of a permit: one run of semaphore_acquire.lua,
// which registers this Locker as waiting when it fails while the Locker
// has waiters on the name.
func (l *locker) semAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	n := l.sems.get(req.Name)
	if err := l.checkLock(ctx, n.keys); err != nil {
		return nil, err
	}
	ls := &semLease{l: l, n: n, value: l.values.next("")}
	ls.valueArg = ls.value
	reg := l.semHub.registration(n)
	var id, last any = "", "0"
	if reg.id != nil {
		id = reg.id
		if reg.last {
			last = "1"
		}
	}
	permits := strconv.Itoa(req.Permits)
	args := append(semAcquireScript.args(ls.args[:], "5"), n.lockArg, n.sem.tokensArg, n.sem.permitsArg, n.fenceArg, n.queueArg,
		ls.valueArg, l.ttl.get(req.TTL), permits, id, regLifetimeArg, last)
	v, err := semAcquireScript.run(ctx, l.client, args).Result()
	if err != nil {
		l.semHub.registered(n, reg, false, err)
		// The script may have run with its reply lost: take back the
		// permit it may have granted (in the background, as a lock's
		// attempt does).
		l.semTakeBack(ctx, ls)
		return nil, fmt.Errorf("redis: acquire: %w", err)
	}
	switch v := v.(type) {
	case int64:
		l.semHub.registered(n, reg, true, nil)
		ls.token = uint64(v)
		return ls, nil
	case []any:
		l.semHub.registered(n, reg, false, nil)
		switch {
		case len(v) == 1:
			ms, _ := v[0].(int64)
			return nil, notAcquired(ms)
		case len(v) == 2:
			return nil, fmt.Errorf("redis: the semaphore is in use with %v permits, not %d: %w", v[1], req.Permits, driver.ErrInvalidOption)
		}
	}
	l.semHub.registered(n, reg, false, nil)
	return nil, fmt.Errorf("redis: acquire: unexpected reply %v", v)
}

// semTakeBack releases, in the background, the permit a failed attempt
// may hold; it returns when that is done or ctx ends (Close waits for it).
func (l *locker) semTakeBack(ctx context.Context, ls *semLease) {
	done := l.semHub.cleanup(func() {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		takeBack(cctx, func(ctx context.Context) bool {
			r, err := ls.release(ctx)
			return r || err != nil
		})
	})
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// semLease is one permit of a semaphore.
type semLease struct {
	l        *locker
	n        *names
	value    string
	valueArg any // value, boxed
	token    uint64
	// args is the argument list of the acquire, then of the release
	// (which runs once, after the acquire returned).
	args [max(semAcquireArgc, semReleaseArgc)]any
}

func (ls *semLease) Token() uint64         { return ls.token }
func (ls *semLease) Lost() <-chan struct{} { return nil }

func (ls *semLease) Refresh(ctx context.Context, ttl time.Duration) error {
	n := ls.n
	var list [semRefreshArgc]any
	args := append(semRefreshScript.args(list[:0], "3"), n.lockArg, n.sem.tokensArg, n.sem.permitsArg, ls.valueArg, ls.l.ttl.get(ttl))
	r, err := semRefreshScript.run(ctx, ls.l.client, args).Int64()
	if err != nil {
		return fmt.Errorf("redis: refresh: %w", err)
	}
	if r != 1 {
		return fmt.Errorf("redis: refresh: %w", driver.ErrNotHeld)
	}
	return nil
}

func (ls *semLease) Release(ctx context.Context) error {
	ok, err := ls.release(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("redis: release: %w", driver.ErrNotHeld)
	}
	return nil
}

// release runs semaphore_release.lua, which wakes registered waiters, and
// reports whether it freed a permit.
func (ls *semLease) release(ctx context.Context) (bool, error) {
	l, n := ls.l, ls.n
	cmd, err := l.publishCommand(ctx)
	if err != nil {
		return false, err
	}
	args := append(semReleaseScript.args(ls.args[:], "4"), n.lockArg, n.sem.tokensArg, n.sem.permitsArg, n.queueArg,
		ls.valueArg, cmd, n.chanArg, semWakeArg)
	r, err := semReleaseScript.run(ctx, l.client, args).Int64()
	if err != nil {
		return false, fmt.Errorf("redis: release: %w", err)
	}
	return r == 1, nil
}
