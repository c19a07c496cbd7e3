package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// The tests of the FIFO grant queue of a single server (the Cluster runs
// the same scripts; the conformance suite's Fairness and cancel cases run
// on both).

// queued returns how many entries the name's grant queue holds.
func queued(t *testing.T, ctx context.Context, raw *goredis.Client, name string) int64 {
	t.Helper()
	n, err := raw.ZCard(ctx, keysFor(DefaultPrefix, name).waiters).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitQueued waits until the name's grant queue holds n entries.
func waitQueued(t *testing.T, ctx context.Context, raw *goredis.Client, name string, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for queued(t, ctx, raw, name) != n {
		if time.Now().After(deadline) {
			t.Fatalf("the grant queue of %q holds %d entries after 5s, want %d", name, queued(t, ctx, raw, name), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// leftovers returns the keys of name other than its lock key and fence.
func leftovers(t *testing.T, ctx context.Context, raw *goredis.Client, name string) []string {
	t.Helper()
	k := keysFor(DefaultPrefix, name)
	ks, err := raw.Keys(ctx, k.lock+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, x := range ks {
		if x != k.fence {
			left = append(left, x)
		}
	}
	return left
}

// grantOrder starts one waiter per Locker in ls, each only once the
// previous one is queued, and returns a channel that receives each
// waiter's index when granted (it then holds the lock for hold and
// releases it), or -1 on an error; and a func that waits for the
// releases.
func grantOrder(t *testing.T, ctx context.Context, raw *goredis.Client, name string, ls []*dlock.Locker, queuedBefore int64, hold time.Duration, ttl time.Duration) (<-chan int, func()) {
	t.Helper()
	order := make(chan int, len(ls))
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Acquire(ctx, name, &dlock.AcquireOptions{TTL: ttl})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				order <- -1
				return
			}
			order <- i
			time.Sleep(hold)
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		}()
		waitQueued(t, ctx, raw, name, queuedBefore+int64(i)+1)
	}
	return order, wg.Wait
}

// TestGrantFIFO: waiters of several Lockers enqueued in a known order are
// granted the lock in that order, one round trip after each release.
func TestGrantFIFO(t *testing.T) {
	ctx := testCtx(t)
	raw, d, url := serverOfItsOwn(t, ctx)
	name := uniqueName(t)
	holder := open(t, ctx, url)
	held, err := holder.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	ls := make([]*dlock.Locker, n)
	for i := range ls {
		ls[i] = open(t, ctx, url)
	}
	order, released := grantOrder(t, ctx, raw, name, ls, 0, 2*time.Millisecond, 30*time.Second)
	if info, err := d.(driver.Inspector).Inspect(ctx, name); err != nil || info.Waiters != n {
		t.Errorf("Inspect: %+v, %v; want %d waiters", info, err, n)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range n {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("grant %d went to waiter %d, want their arrival order", want, got)
			}
		case <-ctx.Done():
			t.Fatal("waiters not granted")
		}
	}
	released()
	if left := leftovers(t, ctx, raw, name); len(left) > 0 {
		t.Errorf("after the last release: %q", left)
	}
}

// TestGrantMessageLost: a grant whose message does not reach the waiter
// (its pub/sub connection killed, or its entry naming a channel nobody
// reads) is still taken by the waiter's renewal, within its renewal
// period, with the token the grant issued.
func TestGrantMessageLost(t *testing.T) {
	for _, how := range []string{"channel", "kill"} {
		t.Run(how, func(t *testing.T) {
			ctx := testCtx(t)
			raw, d, url := serverOfItsOwn(t, ctx)
			name := uniqueName(t)
			k := keysFor(DefaultPrefix, name)
			held, err := open(t, ctx, url).TryAcquire(ctx, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			const ttl = 4 * time.Second // renewal every second
			got := queueWaiter(t, ctx, d, raw, name, ttl)
			switch how {
			case "channel":
				// The entry's channel replaced by one nobody reads: the
				// grant's PUBLISH reaches no one.
				vals, err := raw.ZRange(ctx, k.waiters, 0, -1).Result()
				if err != nil || len(vals) != 1 {
					t.Fatalf("queue %q, %v", vals, err)
				}
				data := raw.HGet(ctx, k.waiterData, vals[0]).Val()
				f := splitN(data)
				if err := raw.HSet(ctx, k.waiterData, vals[0], f[0]+" "+f[1]+" nobody-listens").Err(); err != nil {
					t.Fatal(err)
				}
			case "kill":
				// The waiter's subscription connection killed: its
				// reconnect takes a while; the grant is published meanwhile.
				if err := raw.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
					t.Fatal(err)
				}
			}
			pubs := commandCalls(t, ctx, raw, "publish")
			start := time.Now()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := commandCalls(t, ctx, raw, "publish") - pubs; n != 1 {
				t.Fatalf("the release published %d grants, want 1", n)
			}
			select {
			case ls := <-got:
				if ls == nil {
					t.Fatal("no lease")
				}
				d := time.Since(start)
				t.Logf("granted %v after the release", d)
				if d > renewEvery(ttl)+time.Second {
					t.Errorf("granted %v after the release, want within the renewal period %v (+1s)", d, renewEvery(ttl))
				}
				fence, _ := raw.Get(ctx, k.fence).Uint64()
				if ls.Token() != fence {
					t.Errorf("token %d, fence %d", ls.Token(), fence)
				}
				if v := raw.Get(ctx, k.lock).Val(); v != grantValue(t, ls) {
					t.Errorf("the key holds %q, not the waiter's value", v)
				}
				if err := ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter did not take its grant within 5s")
			}
		})
	}
}

func splitN(s string) []string {
	var f []string
	for range 2 {
		i := 0
		for i < len(s) && s[i] != ' ' {
			i++
		}
		f = append(f, s[:i])
		if i < len(s) {
			s = s[i+1:]
		}
	}
	return append(f, s)
}

// TestCancelRacesGrant: a waiter whose ctx ends as the holder releases
// (its grant may be published as it gives up) leaves nothing behind: the
// lock passes to the waiter behind it, no two hold it at once, and no
// queue key remains.
func TestCancelRacesGrant(t *testing.T) {
	ctx := testCtx(t)
	raw, _, url := serverOfItsOwn(t, ctx)
	a, b, c := open(t, ctx, url), open(t, ctx, url), open(t, ctx, url)
	granted := 0
	for i := range 60 {
		name := uniqueName(t) + "/" + strconv.Itoa(i)
		held, err := a.TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		bctx, cancel := context.WithCancel(ctx)
		bgot := make(chan *dlock.Lease, 1)
		go func() {
			ls, err := b.Acquire(bctx, name, nil)
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("b: %v", err)
			}
			bgot <- ls
		}()
		waitQueued(t, ctx, raw, name, 1)
		cgot := make(chan *dlock.Lease, 1)
		go func() {
			ls, err := c.Acquire(ctx, name, nil)
			if err != nil {
				t.Errorf("c: %v", err)
			}
			cgot <- ls
		}()
		waitQueued(t, ctx, raw, name, 2)
		go func() {
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			cancel()
		}()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		bl := <-bgot
		if bl != nil {
			// b won the race: c must still wait.
			granted++
			select {
			case <-cgot:
				t.Fatalf("round %d: b and c hold the lock at once", i)
			case <-time.After(20 * time.Millisecond):
			}
			if err := bl.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var cl *dlock.Lease
		select {
		case cl = <-cgot:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: c not granted within 5s (b granted: %v)", i, bl != nil)
		}
		if cl == nil {
			t.FailNow()
		}
		if err := cl.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			left := leftovers(t, ctx, raw, name)
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: left behind: %q", i, left)
			}
		}
	}
	t.Logf("b won the race in %d of 60 rounds", granted)
}

// TestDeadWaiterSkipped: an entry whose waiter stopped renewing (written
// here by a raw client with a short expiry) is skipped once it expired:
// the release grants the live waiter behind it, by its message (well
// within its renewal period), and the dead entry is gone.
func TestDeadWaiterSkipped(t *testing.T) {
	ctx := testCtx(t)
	raw, _, url := serverOfItsOwn(t, ctx)
	name := uniqueName(t)
	k := keysFor(DefaultPrefix, name)
	held, err := open(t, ctx, url).TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	now, err := raw.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	dead := "dead-waiter|"
	if err := raw.ZAdd(ctx, k.waiters, goredis.Z{Score: 0, Member: dead}).Err(); err != nil {
		t.Fatal(err)
	}
	exp := now.UnixMilli() + 100
	if err := raw.HSet(ctx, k.waiterData, dead, fmt.Sprintf("%d 30000 %sg:nobody", exp, DefaultPrefix)).Err(); err != nil {
		t.Fatal(err)
	}
	order, _ := grantOrder(t, ctx, raw, name, []*dlock.Locker{open(t, ctx, url)}, 1, 0, 30*time.Second)
	time.Sleep(200 * time.Millisecond) // the dead entry expires
	start := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case i := <-order:
		if i != 0 {
			t.FailNow()
		}
		if d := time.Since(start); d > 300*time.Millisecond {
			t.Errorf("the live waiter was granted %v after the release: not by the release's grant", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the live waiter behind a dead entry was not granted")
	}
	if v := raw.HGet(ctx, k.waiterData, dead).Val(); v != "" || raw.ZScore(ctx, k.waiters, dead).Err() != goredis.Nil {
		t.Errorf("the dead entry is still queued")
	}
}

// TestCrashedHolderPassesToHead: a holder that never releases (its key
// set by a raw client with a short TTL) is followed, once the key
// expires, by the waiter at the head of the queue, then the next, in
// arrival order, within the TTL plus a renewal period.
func TestCrashedHolderPassesToHead(t *testing.T) {
	ctx := testCtx(t)
	raw, _, url := serverOfItsOwn(t, ctx)
	name := uniqueName(t)
	k := keysFor(DefaultPrefix, name)
	const crashTTL = 500 * time.Millisecond
	if err := raw.Set(ctx, k.lock, "crashed-holder|", crashTTL).Err(); err != nil {
		t.Fatal(err)
	}
	set := time.Now()
	ls := []*dlock.Locker{open(t, ctx, url), open(t, ctx, url), open(t, ctx, url)}
	order, _ := grantOrder(t, ctx, raw, name, ls, 0, 5*time.Millisecond, 4*time.Second)
	for want := range ls {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("grant %d went to waiter %d, want the arrival order", want, got)
			}
			if want == 0 {
				d := time.Since(set)
				t.Logf("head granted %v after the crashed holder's key was set", d)
				if d > crashTTL+renewEvery(4*time.Second)+time.Second {
					t.Errorf("head granted %v after the key was set: want within its TTL %v plus a renewal period", d, crashTTL)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatal("waiters not granted after the holder expired")
		}
	}
}

// TestGrantedLeaseStart: a lease granted by a release is counted from a
// time no later than the server set the key: the key's remaining PTTL
// covers the lease's local deadline.
func TestGrantedLeaseStart(t *testing.T) {
	ctx := testCtx(t)
	raw, d, url := serverOfItsOwn(t, ctx)
	name := uniqueName(t)
	const ttl = 2 * time.Second
	// The server counts a key's life on its wall clock, the lease on the
	// client's monotonic one: a step of the wall clock between the grant
	// and the PTTL read (a VM's clock being corrected) moves the PTTL by
	// the step, which no grant time can account for (the portable layer's
	// drift margin does). A try whose two clocks disagree by over
	// clockSlack across it is measured again.
	const clockSlack = 300 * time.Microsecond
	// clocks reads the server's clock and the client's at the midpoint
	// of the round trip that read it.
	clocks := func() (client, server time.Time) {
		c := time.Now()
		tm, err := raw.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return c.Add(time.Since(c) / 2), tm
	}
	clocks() // a warm connection: the first round trip may dial
	for _, hold := range []time.Duration{0, 300 * time.Millisecond, 700 * time.Millisecond} {
		for try := 1; ; try++ {
			c0, s0 := clocks()
			held, err := open(t, ctx, url).TryAcquire(ctx, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := queueWaiter(t, ctx, d, raw, name, ttl)
			time.Sleep(hold)
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			ls := <-got
			if ls == nil {
				t.FailNow()
			}
			before := time.Now()
			pttl := raw.PTTL(ctx, keysFor(DefaultPrefix, name).lock).Val()
			at := ls.(driver.Granted).GrantedAt()
			// The server expires the key no earlier than before + pttl − 1ms
			// (it truncates its clock to milliseconds), and may have set it up
			// to 1ms early for the same reason (the portable layer's drift
			// margin, 1% of the TTL + 2ms, covers both): the lease counted
			// from at must end by then.
			local, server := at.Add(ttl), before.Add(pttl+time.Millisecond)
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
			c1, s1 := clocks()
			if skew := s1.Sub(s0) - c1.Sub(c0); (skew > clockSlack || skew < -clockSlack) && try < 5 {
				t.Logf("hold %v: the server's clock moved %v against the client's during the try: measured again", hold, skew)
				continue
			}
			if local.After(server) {
				t.Errorf("hold %v: the lease's local end is %v after the server's expiry (pttl %v, granted %v before the PTTL)", hold, local.Sub(server), pttl, before.Sub(at))
			}
			break
		}
	}
}

// TestGrantChannelFlat: one Locker waiting on many names at once has one
// subscription on the server (its grant channel), not one per name, and
// each waiter is still granted by its own release.
func TestGrantChannelFlat(t *testing.T) {
	ctx := testCtx(t)
	raw, _, url := serverOfItsOwn(t, ctx)
	holder, w := open(t, ctx, url), open(t, ctx, url)
	const n = 300
	base := uniqueName(t)
	held := make([]*dlock.Lease, n)
	got := make(chan error, n)
	for i := range n {
		name := base + "/" + strconv.Itoa(i)
		var err error
		if held[i], err = holder.TryAcquire(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		go func() {
			ls, err := w.Acquire(ctx, name, nil)
			if err == nil {
				err = ls.Release(ctx)
			}
			got <- err
		}()
	}
	for i := range n {
		waitQueued(t, ctx, raw, base+"/"+strconv.Itoa(i), 1)
	}
	chs, err := raw.PubSubChannels(ctx, DefaultPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(chs) != 1 {
		t.Errorf("one Locker waiting on %d names subscribes %d channels, want 1: %q", n, len(chs), chs[:min(len(chs), 5)])
	}
	for _, ls := range held {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
}

// shardCount is how many grant channels the Locker l has subscribed.
func shardCount(l *dlock.Locker) int {
	h := l.Driver().(*locker).grants
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.shards)
}

// TestSubscribeOnlyWhenQueued: an Acquire that finds its lock free opens
// no grant subscription (on a Cluster, one connection per slot: fresh
// names would each open one); a waiter that queues subscribes then, and
// its grant reaches it.
func TestSubscribeOnlyWhenQueued(t *testing.T) {
	for _, mk := range []func(testing.TB) *target{singleTarget, clusterTarget} {
		tg := mk(t)
		t.Run(tg.name, func(t *testing.T) {
			ctx := testCtx(t)
			holder, w := open(t, ctx, tg.url), open(t, ctx, tg.url)
			base := uniqueName(t)
			for i := range 20 {
				ls, err := w.Acquire(ctx, base+"/"+strconv.Itoa(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if n := shardCount(w); n != 0 {
				t.Fatalf("%d grant subscriptions after 20 uncontended acquires, want none", n)
			}
			name := base + "/held"
			held, err := holder.Acquire(ctx, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				ls, err := w.Acquire(ctx, name, nil)
				if err == nil {
					err = ls.Release(ctx)
				}
				got <- err
			}()
			deadline := time.Now().Add(5 * time.Second)
			for shardCount(w) != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("a queued waiter's Locker has %d grant subscriptions after 5s, want 1", shardCount(w))
				}
				time.Sleep(time.Millisecond)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the queued waiter was not granted within 10s of the release")
			}
		})
	}
}

// queueWaiter starts a blocking Acquire of name on d and returns once the
// waiter is queued on the server; the lease (nil on an error, which fails
// t) arrives on the channel.
func queueWaiter(t *testing.T, ctx context.Context, d driver.Locker, raw *goredis.Client, name string, ttl time.Duration) <-chan driver.Lease {
	t.Helper()
	got := make(chan driver.Lease, 1)
	go func() {
		ls, err := d.(driver.Blocker).Acquire(ctx, driver.Request{Name: name, TTL: ttl})
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	waitQueued(t, ctx, raw, name, 1)
	return got
}
