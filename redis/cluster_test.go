package redis

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestClusterResubscribe: waiters of one Locker on names in different
// slots of the same masters keep their grants after every pub/sub
// connection is killed (CLIENT KILL TYPE pubsub on every master): the
// sharded subscriptions come back (a resubscription must not cross slots,
// which the server would refuse with CROSSSLOT), and a release then wakes
// its waiter within 100ms, well under the fallback timer.
func TestClusterResubscribe(t *testing.T) {
	c := testenv.NewRedisCluster(t, 3)
	ctx := testCtx(t)
	holder, w := open(t, ctx, c.URL), open(t, ctx, c.URL)
	id := w.Driver().(*locker).grants.id
	master := func(slot int) *testenv.Server { return c.Nodes[slot*len(c.Nodes)/clusterSlots] }

	// Three names per master, each in its own slot.
	base := uniqueName(t)
	perMaster := map[*testenv.Server]int{}
	seen := map[int]bool{}
	var names []string
	for i := 0; len(names) < 3*len(c.Nodes); i++ {
		name := base + "/" + strconv.Itoa(i)
		slot := keySlot(keysFor(DefaultPrefix, name).lock)
		if seen[slot] || perMaster[master(slot)] == 3 {
			continue
		}
		seen[slot] = true
		perMaster[master(slot)]++
		names = append(names, name)
	}
	held := make([]*dlock.Lease, len(names))
	type wake struct {
		at  time.Time
		err error
	}
	woke := make([]chan wake, len(names))
	for i, name := range names {
		var err error
		if held[i], err = holder.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		woke[i] = make(chan wake, 1)
		go func() {
			ls, err := w.Acquire(ctx, name, nil)
			woke[i] <- wake{time.Now(), err}
			if err == nil {
				ls.Release(ctx)
			}
		}()
	}
	// subscribed reports the names whose slot's grant channel is
	// subscribed on its master.
	subscribed := func() int {
		n := 0
		for _, name := range names {
			ch := DefaultPrefix + "{" + slotTag(keySlot(keysFor(DefaultPrefix, name).lock)) + "}g:" + id
			v, err := testenv.RedisDo(ctx, master(keySlot(ch)).Addr, "PUBSUB", "SHARDNUMSUB", ch)
			if err != nil {
				t.Fatal(err)
			}
			if a, ok := v.([]any); ok && len(a) == 2 && a[1] == int64(1) {
				n++
			}
		}
		return n
	}
	waitSubscribed := func(what string) {
		deadline := time.Now().Add(5 * time.Second)
		for subscribed() < len(names) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d wake-up channels subscribed after 5s", what, subscribed(), len(names))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitSubscribed("before the kill")
	for _, s := range c.Nodes {
		if _, err := testenv.RedisDo(ctx, s.Addr, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			t.Fatal(err)
		}
	}
	waitSubscribed("after CLIENT KILL TYPE pubsub on every master")
	// Let the waiters' fallback timers grow to their longest (about 1s):
	// a quick hand-off below can then only come from a wake-up.
	time.Sleep(1500 * time.Millisecond)
	for i, name := range names {
		start := time.Now()
		if err := held[i].Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-woke[i]:
			if got.err != nil {
				t.Fatalf("%s: waiter: %v", name, got.err)
			}
			if d := got.at.Sub(start); d > 100*time.Millisecond {
				t.Errorf("%s (slot %d): hand-off took %v after the reconnect, want < 100ms (a lost wake-up, the fallback timer fired)",
					name, keySlot(keysFor(DefaultPrefix, name).lock), d)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: waiter not granted within 5s of the release", name)
		}
	}
}

// TestClusterAllocsAsOneServer: a blocking Acquire and Release of a free
// lock in a Cluster allocates at most once more than on a single server
// (the Cluster's sharded grant channel). go-redis routes each Cluster
// command itself, and what that routing makes per command shows here: a
// COMMAND INFO lookup per script call, which with ContextTimeoutEnabled
// made a context and a timer of its own each time, cost 8 allocations
// more per acquire+release.
func TestClusterAllocsAsOneServer(t *testing.T) {
	ctx := testCtx(t)
	allocs := func(url string) float64 {
		cycle, closeFn := driverCycleAt(t, url, true)
		defer closeFn()
		name := uniqueName(t)
		for range 50 { // connections, loaded scripts, the name's keys
			if err := cycle(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		return testing.AllocsPerRun(200, func() {
			if err := cycle(ctx, name); err != nil {
				t.Fatal(err)
			}
		})
	}
	one, cluster := allocs(testenv.Redis(t).URL), allocs(testenv.RedisCluster(t).URL)
	t.Logf("allocations per acquire+release: one server %v, Cluster %v", one, cluster)
	if cluster > one+1 {
		t.Errorf("a Cluster acquire+release allocates %v times, a single server's %v: more than one more", cluster, one)
	}
}
