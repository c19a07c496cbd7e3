package redis

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testenv"
)

// target is one deployment the tests run against, with raw clients to
// its servers for checks and faults behind the driver's back.
type target struct {
	name    string
	url     string
	addrs   []string                  // the servers' addresses as the URL names them (nil for a cluster, whose client learns the nodes' own)
	raw     []goredis.UniversalClient // one per server (one ClusterClient for a cluster)
	redlock bool
}

// del deletes key on every server of the target (a revocation).
func (tg *target) del(ctx context.Context, key string) (int64, error) {
	var n int64
	for _, c := range tg.raw {
		m, err := c.Del(ctx, key).Result()
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

func rawClient(t testing.TB, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func singleTarget(t testing.TB) *target {
	s := testenv.Redis(t)
	return &target{name: "single", url: s.URL, addrs: []string{s.Addr}, raw: []goredis.UniversalClient{rawClient(t, s.Addr)}}
}

func clusterTarget(t testing.TB) *target {
	c := testenv.RedisCluster(t)
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs, DisableIdentity: true})
	t.Cleanup(func() { cc.Close() })
	return &target{name: "cluster", url: c.URL, raw: []goredis.UniversalClient{cc}}
}

func redlockTarget(t testing.TB, n int) *target {
	nodes := testenv.RedisNodes(t, n)
	return redlockOn(t, nodes)
}

func redlockOn(t testing.TB, nodes []*testenv.Server) *target {
	tg := &target{name: "redlock" + string(rune('0'+len(nodes))), redlock: true}
	addrs := make([]string, len(nodes))
	for i, s := range nodes {
		addrs[i] = s.Addr
		tg.raw = append(tg.raw, rawClient(t, s.Addr))
	}
	tg.url = "redlock://" + strings.Join(addrs, ",")
	tg.addrs = addrs
	return tg
}

// forEach runs f against a single server, a 3-master cluster and Redlock
// over 3 and 5 nodes.
func forEach(t *testing.T, f func(t *testing.T, tg *target)) {
	for _, mk := range []func(testing.TB) *target{
		singleTarget,
		clusterTarget,
		func(t testing.TB) *target { return redlockTarget(t, 3) },
		func(t testing.TB) *target { return redlockTarget(t, 5) },
	} {
		tg := mk(t)
		t.Run(tg.name, func(t *testing.T) { f(t, tg) })
	}
}

// openDriver opens the driver of tg's URL, closed at the end of the test.
func openDriver(t testing.TB, ctx context.Context, tg *target) driver.Locker {
	t.Helper()
	drv, err := openURL(ctx, tg.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	return drv
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, ctx context.Context, url string) *dlock.Locker {
	t.Helper()
	l, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func uniqueName(t *testing.T) string { return t.Name() + "/" + rand.Text()[:8] }

func TestLockCycle(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		a, b := open(t, ctx, tg.url), open(t, ctx, tg.url)
		name := uniqueName(t)
		la, err := a.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 10 * time.Second, Owner: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if la.Token() == 0 {
			t.Error("token 0")
		}
		_, err = b.TryAcquire(ctx, name, nil)
		var na *driver.NotAcquiredError
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.As(err, &na) {
			t.Fatalf("TryAcquire of a held lock: %v, want a NotAcquiredError", err)
		}
		if na.RetryAfter <= 0 || na.RetryAfter > 10*time.Second {
			t.Errorf("RetryAfter %v, want the holder's PTTL in (0, 10s]", na.RetryAfter)
		}
		info, err := b.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || info.Owner != "alice" || info.TTL <= 0 || info.TTL > 10*time.Second || info.Fence < la.Token() {
			t.Errorf("Inspect = %+v, want held by alice with a TTL and fence >= %d", info, la.Token())
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := la.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("second Release: %v, want ErrNotHeld", err)
		}
		if info, err := b.Inspect(ctx, name); err != nil || info.Held {
			t.Errorf("Inspect after release = %+v, %v", info, err)
		}
		lb, err := b.TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Release(ctx)
		if lb.Token() <= la.Token() {
			t.Errorf("token %d after %d: want it to increase", lb.Token(), la.Token())
		}
		if err := lb.Refresh(ctx); err != nil {
			t.Errorf("Refresh: %v", err)
		}
	})
}

// TestWatchWakes checks Redlock's Watch directly (no fallback timer
// behind it): a waiter whose attempt failed after Watch returned is woken
// by the holder's release, for a fresh name (a new subscription, which
// Watch must have seen confirmed) and for a name watched before (a
// lingering subscription).
func TestWatchWakes(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		if !tg.redlock {
			t.Skip("Redlock only: a single server and a Cluster grant from a queue (driver.Blocker)")
		}
		ctx := testCtx(t)
		w, err := openURL(ctx, tg.url)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		other := open(t, ctx, tg.url)
		base := uniqueName(t)
		for i := range 40 {
			name := base + "/" + string(rune('a'+i%20))
			held, err := other.TryAcquire(ctx, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			wake, stop, err := w.(driver.Watcher).Watch(ctx, driver.Request{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.TryAcquire(ctx, driver.Request{Name: name, TTL: time.Second}); !errors.Is(err, driver.ErrNotAcquired) {
				t.Fatalf("TryAcquire of a held lock: %v", err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-wake:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: no wake-up within 5s of a release", i)
			}
			stop()
		}
	})
}

// TestWaiterQueue (Redlock): a failed attempt registers its Locker while it has
// waiters; a release wakes the one registered longest ago (not every
// waiter); a Locker whose last waiter leaves drops out of the queue.
func TestWaiterQueue(t *testing.T) {
	forEachRedlockHeld(t, func(t *testing.T, tg *target, ctx context.Context, name string, held *dlock.Lease) {
		k := keysFor(DefaultPrefix, name)
		var ids []string
		var stops []func()
		for range 3 {
			w, _, stop := registeredWatcher(t, ctx, tg, name)
			stops = append(stops, stop)
			ids = append(ids, hubOf(w).id)
			time.Sleep(5 * time.Millisecond) // distinct registration times
		}
		// queueIs reports whether a quorum of the servers (all of one)
		// hold exactly ids in the name's queue: a Redlock node that was
		// slow to answer may have missed a registration.
		queueIs := func(ids ...string) (bool, []string) {
			var views []string
			match := 0
			for _, c := range tg.raw {
				m, err := c.ZRange(ctx, k.queue, 0, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				views = append(views, strings.Join(m, ","))
				if strings.Join(m, ",") == strings.Join(ids, ",") {
					match++
				}
			}
			return match >= len(tg.raw)/2+1, views
		}
		if ok, views := queueIs(ids...); !ok {
			t.Fatalf("queue %q, want %q", views, ids)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, views := queueIs(ids[1:]...); !ok {
			t.Fatalf("after a release the queue is %q, want %q (the oldest woken)", views, ids[1:])
		}
		stops[1]()
		stops[2]()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			ok, views := queueIs()
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the Locker whose waiter left is still queued: %q", views)
			}
		}
		stops[0]()
	})
}

// TestWakePassedOn (Redlock): a release wakes one registered Locker; one
// that has no waiter left when the wake-up arrives (a registration that
// outlived its waiters, as a crashed or late one does) passes it on to the
// next registered Locker, whose waiter would otherwise wait for its
// fallback timer. It fails without pass.lua: B is never woken.
func TestWakePassedOn(t *testing.T) {
	forEachRedlockHeld(t, func(t *testing.T, tg *target, ctx context.Context, name string, held *dlock.Lease) {
		k := keysFor(DefaultPrefix, name)
		// A's waiter leaves; its Locker stays subscribed (linger) and
		// leaves the queue. Its registration is then put back on every
		// node, oldest of all: it outlived its waiter.
		a, _, stopA := registeredWatcher(t, ctx, tg, name)
		stopA()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			n := int64(0)
			for _, c := range tg.raw {
				m, err := c.ZCard(ctx, k.queue).Result()
				if err != nil {
					t.Fatal(err)
				}
				n += m
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("A's Locker did not leave the queue")
			}
		}
		for _, c := range tg.raw {
			if err := c.ZAdd(ctx, k.queue, goredis.Z{Score: float64(time.Now().Add(regLifetime).UnixMilli()), Member: hubOf(a).id}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Millisecond) // a later registration time
		_, wakeB, stopB := registeredWatcher(t, ctx, tg, name)
		defer stopB()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-wakeB:
		case <-time.After(5 * time.Second):
			t.Fatal("the release's wake-up, which reached A's Locker without a waiter, was not passed on to B")
		}
	})
}

// TestWakeAtQuorum (Redlock): a release's message from one node does not
// wake a waiter; the same release's message from a quorum of nodes does.
// Woken by the first node, a waiter would try before the release ran on
// the others, be refused, and drop their messages as duplicates (it then
// waited for its fallback timer, the lock free). It fails without the
// quorum: the first message wakes.
func TestWakeAtQuorum(t *testing.T) {
	defer func(d time.Duration) { minorityWake = d }(minorityWake)
	minorityWake = time.Hour // a minority never wakes within the test
	forEachRedlockHeld(t, func(t *testing.T, tg *target, ctx context.Context, name string, held *dlock.Lease) {
		w, wake, stop := registeredWatcher(t, ctx, tg, name)
		defer stop()
		h := hubOf(w)
		channel := keysFor(DefaultPrefix, name).channel + ":" + h.id
		payload := "release-" + rand.Text()
		quorum := len(tg.raw)/2 + 1
		for i := range quorum {
			if err := tg.raw[i].Publish(ctx, channel, payload).Err(); err != nil {
				t.Fatal(err)
			}
			// Wait until the hub has read the message.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				h.mu.Lock()
				s := h.subs[channel]
				seen := s != nil && s.last == payload && s.seen == i+1
				h.mu.Unlock()
				if seen {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("message %d of the release not read", i+1)
				}
			}
			select {
			case <-wake:
				if i+1 < quorum {
					t.Fatalf("woken by %d of %d nodes' messages, fewer than a quorum", i+1, len(tg.raw))
				}
			default:
				if i+1 == quorum {
					t.Fatalf("not woken by a quorum (%d) of the release's messages", quorum)
				}
			}
		}
	})
}

// TestWakeMinorityLate (Redlock): a release's message from fewer than a
// quorum of nodes (their queues disagree, or the others are down) wakes
// the waiter after minorityWake. It fails without that timer.
func TestWakeMinorityLate(t *testing.T) {
	defer func(d time.Duration) { minorityWake = d }(minorityWake)
	minorityWake = 10 * time.Millisecond
	forEachRedlockHeld(t, func(t *testing.T, tg *target, ctx context.Context, name string, held *dlock.Lease) {
		w, wake, stop := registeredWatcher(t, ctx, tg, name)
		defer stop()
		channel := keysFor(DefaultPrefix, name).channel + ":" + hubOf(w).id
		if err := tg.raw[0].Publish(ctx, channel, "release-"+rand.Text()).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-wake:
		case <-time.After(5 * time.Second):
			t.Fatal("a release's message from a minority of the nodes woke nobody")
		}
	})
}

// forEachRedlockHeld runs f on each Redlock target with a name held by
// another Locker.
func forEachRedlockHeld(t *testing.T, f func(t *testing.T, tg *target, ctx context.Context, name string, held *dlock.Lease)) {
	forEach(t, func(t *testing.T, tg *target) {
		if !tg.redlock {
			t.Skip("Redlock only: a single server and a Cluster grant from a queue (driver.Blocker)")
		}
		ctx := testCtx(t)
		name := uniqueName(t)
		held, err := open(t, ctx, tg.url).TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		f(t, tg, ctx, name, held)
	})
}

// registeredWatcher opens a driver that watches name, held by another
// Locker, and makes it register as a waiter by a failed attempt; it
// returns the driver, its wake-up channel and the watch's stop.
func registeredWatcher(t *testing.T, ctx context.Context, tg *target, name string) (driver.Locker, <-chan struct{}, func()) {
	t.Helper()
	w, err := openURL(ctx, tg.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	wake, stop, err := w.(driver.Watcher).Watch(ctx, driver.Request{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.TryAcquire(ctx, driver.Request{Name: name, TTL: time.Second}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatal(err)
	}
	return w, wake, stop
}

func hubOf(d driver.Locker) *hub { return d.(*redlock).hub }

func TestRevokedLeaseIsLost(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		l := open(t, ctx, tg.url)
		name := uniqueName(t)
		ls, err := l.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 600 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := tg.del(ctx, keysFor(DefaultPrefix, name).lock); err != nil || n == 0 {
			t.Fatalf("DEL: %d, %v", n, err)
		}
		select {
		case <-ls.Done():
			if !errors.Is(ls.Err(), dlock.ErrLockLost) {
				t.Errorf("Err = %v, want ErrLockLost", ls.Err())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("loss not signalled within 10s")
		}
		if err := ls.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Refresh of a lost lease: %v, want ErrNotHeld", err)
		}
		if info, err := l.Inspect(ctx, name); err != nil || info.Held {
			t.Errorf("the lost lock was re-created: %+v, %v", info, err)
		}
	})
}

// TestNoForeignRelease: a lease that expired cannot release or refresh
// the lock that another owner took since.
func TestNoForeignRelease(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		a, b := open(t, ctx, tg.url), open(t, ctx, tg.url)
		name := uniqueName(t)
		la, err := a.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 100 * time.Millisecond, NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		<-la.Done()
		var lb *dlock.Lease
		for lb == nil {
			lb, err = b.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 10 * time.Second, Owner: "bob"})
			if err != nil {
				t.Fatal(err)
			}
		}
		defer lb.Release(ctx)
		// The driver's own calls, below the portable layer's bookkeeping.
		drv := openDriver(t, ctx, tg)
		old, err := drv.TryAcquire(ctx, driver.Request{Name: name + "/other", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer old.Release(ctx)
		if err := la.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Release of an expired lease: %v, want ErrNotHeld", err)
		}
		info, err := b.Inspect(ctx, name)
		if err != nil || !info.Held || info.Owner != "bob" {
			t.Errorf("after the old holder's Release: %+v, %v; want still held by bob", info, err)
		}
	})
}

// TestDriverRefreshRelease checks refresh and release at the driver level:
// a foreign value neither refreshes nor deletes, and refresh never
// re-creates a deleted key.
func TestDriverRefreshRelease(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		drv := openDriver(t, ctx, tg)
		name := uniqueName(t)
		ls, err := drv.TryAcquire(ctx, driver.Request{Name: name, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tg.del(ctx, keysFor(DefaultPrefix, name).lock); err != nil {
			t.Fatal(err)
		}
		if err := ls.Refresh(ctx, 10*time.Second); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Refresh after DEL: %v, want ErrNotHeld", err)
		}
		if n, _ := tg.del(ctx, keysFor(DefaultPrefix, name).lock); n != 0 {
			t.Errorf("Refresh re-created the key on %d servers", n)
		}
		ls2, err := drv.TryAcquire(ctx, driver.Request{Name: name, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Release by the old grant: %v, want ErrNotHeld", err)
		}
		if err := ls2.Release(ctx); err != nil {
			t.Errorf("Release by the holder: %v", err)
		}
	})
}

func TestCancelledAcquireLeavesNothing(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		a, b := open(t, ctx, tg.url), open(t, ctx, tg.url)
		name := uniqueName(t)
		la, err := a.Acquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = b.Acquire(cctx, name, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire with an ended context: %v", err)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lc, err := open(t, ctx, tg.url).TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatalf("after a cancelled Acquire and a release: %v", err)
		}
		lc.Release(ctx)
	})
}

// TestNames: names that could break the hash tag or collide.
func TestNames(t *testing.T) {
	names := []string{
		"plain", "a}", "a%7D", "}leading", "{braces}", "{", "}", "%", "%25",
		"with space\nand newline", "ünïcødé/日本", strings.Repeat("n", dlock.MaxNameLen),
		strings.Repeat("}", dlock.MaxNameLen),
	}
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		l := open(t, ctx, tg.url)
		prefix := uniqueName(t) + "/"
		var leases []*dlock.Lease
		for _, n := range names {
			name := prefix + n
			if len(name) > dlock.MaxNameLen {
				name = name[len(name)-dlock.MaxNameLen:]
			}
			ls, err := l.TryAcquire(ctx, name, nil)
			if err != nil {
				t.Fatalf("%q: %v (a collision with another name?)", n, err)
			}
			leases = append(leases, ls)
		}
		for _, ls := range leases {
			if err := ls.Release(ctx); err != nil {
				t.Errorf("%q: %v", ls.Name(), err)
			}
		}
	})
}

// TestHashTag: the three keys of a name share a slot whatever the name.
func TestHashTag(t *testing.T) {
	tg := clusterTarget(t)
	ctx := testCtx(t)
	cc := tg.raw[0].(*goredis.ClusterClient)
	seen := map[string]string{}
	for _, n := range []string{"x", "}", "}}x{", "a}b", "a%7Db", "%", "{a}", strings.Repeat("}", 1024)} {
		k := keysFor(DefaultPrefix, n)
		var slots []int64
		for _, key := range []string{k.lock, k.fence, k.channel} {
			s, err := cc.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots = append(slots, s)
		}
		if int64(keySlot(k.lock)) != slots[0] {
			t.Errorf("keySlot(%q) = %d, the server says %d", k.lock, keySlot(k.lock), slots[0])
		}
		if slots[0] != slots[1] || slots[0] != slots[2] {
			t.Errorf("name %q: keys %q in slots %v", n, k.lock, slots)
		}
		if prev, dup := seen[k.lock]; dup {
			t.Errorf("names %q and %q share the key %q", prev, n, k.lock)
		}
		seen[k.lock] = n
	}
}

// TestClusterShardedPubSub: on Redis 7 the cluster driver publishes with
// SPUBLISH.
func TestClusterShardedPubSub(t *testing.T) {
	c := testenv.RedisCluster(t)
	ctx := testCtx(t)
	drv, err := openURL(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	cmd, err := drv.(*locker).publishCommand(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := c.Nodes[0].Version
	if want := "SPUBLISH"; v >= "7" && cmd != want {
		t.Errorf("Redis %s: publish command %s, want %s", v, cmd, want)
	}
	t.Logf("Redis %s: %s", v, cmd)
}

func TestCapabilities(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		url, strategy string
		fencing, fair bool
		wait          driver.WaitKind
	}{
		{"redis://127.0.0.1:1/0", "set-nx", true, true, driver.WaitQueue},
		{"rediss://127.0.0.1:1/0", "set-nx", true, true, driver.WaitQueue},
		{"redis+cluster://127.0.0.1:1,127.0.0.1:2", "cluster", true, true, driver.WaitQueue},
		{"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "redlock", false, false, driver.WaitNotify},
	} {
		l, err := dlock.Open(ctx, tc.url)
		if err != nil {
			t.Fatal(err)
		}
		c := l.Capabilities()
		l.Close()
		if c.Backend != "redis" || c.Strategy != tc.strategy || c.Fencing != tc.fencing || c.FencingNote == "" ||
			c.Fair != tc.fair || c.Wait != tc.wait || c.ReleaseOnCrash != driver.ReleaseAfterTTL || c.TokensSurviveRestart {
			t.Errorf("%s: %+v", tc.url, c)
		}
	}
}

func TestOpenLockerKeepsClient(t *testing.T) {
	ctx := testCtx(t)
	s := testenv.Redis(t)
	client := goredis.NewClient(&goredis.Options{Addr: s.Addr})
	defer client.Close()
	l, err := OpenLocker(client, &Options{Prefix: "mine:"})
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName(t)
	ls, err := l.Acquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := client.Exists(ctx, "mine:{"+name+"}").Result(); err != nil || n != 1 {
		t.Errorf("key with the custom prefix: %d, %v", n, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ls.Err(), dlock.ErrClosed) {
		t.Errorf("lease after Close: %v", ls.Err())
	}
	if err := client.Ping(ctx).Err(); err != nil {
		t.Errorf("Close closed the caller's client: %v", err)
	}
	if n, _ := client.Exists(ctx, "mine:{"+name+"}").Result(); n != 0 {
		t.Error("Close did not release the lease")
	}

	nodes := []goredis.UniversalClient{client, client, client}
	rl, err := OpenRedlock(nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.TryAcquire(ctx, uniqueName(t), nil); err != nil {
		t.Fatal(err)
	}
	rl.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Errorf("Close closed the caller's Redlock clients: %v", err)
	}
}

// TestConcurrentMutualExclusion: many goroutines on several Lockers never
// overlap, and tokens increase with every grant.
func TestConcurrentMutualExclusion(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		name := uniqueName(t)
		var (
			mu        sync.Mutex
			inside    bool
			lastToken uint64
			wg        sync.WaitGroup
		)
		for i := range 3 {
			l := open(t, ctx, tg.url)
			for j := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						ls, err := l.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 5 * time.Second})
						if err != nil {
							t.Error(i, j, err)
							return
						}
						mu.Lock()
						if inside {
							t.Error("two holders at once")
						}
						if ls.Token() <= lastToken && !tg.redlock {
							t.Errorf("token %d after %d", ls.Token(), lastToken)
						}
						inside, lastToken = true, ls.Token()
						mu.Unlock()
						time.Sleep(time.Millisecond)
						mu.Lock()
						inside = false
						mu.Unlock()
						if err := ls.Release(ctx); err != nil {
							t.Error(err)
						}
					}
				}()
			}
		}
		wg.Wait()
	})
}
