package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/testenv"
)

// forSemaphores runs f against a single server and a 3-master Cluster, the
// deployments with semaphores.
func forSemaphores(t *testing.T, f func(t *testing.T, tg *target)) {
	for _, mk := range []func(testing.TB) *target{singleTarget, clusterTarget} {
		tg := mk(t)
		t.Run(tg.name, func(t *testing.T) { f(t, tg) })
	}
}

func semaphore(t *testing.T, l *dlock.Locker, name string, n int) *dlock.Semaphore {
	t.Helper()
	s, err := l.Semaphore(name, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// semKeys are the semaphore's keys under the default prefix.
func semKeys(name string) layout.RedisSemaphore {
	return layout.RedisSemaphoreKeys(DefaultPrefix, name)
}

// heldPermit is where the semaphore tests that reach behind the driver
// start: two Lockers on tg, its raw client, a fresh semaphore name and its
// keys, and one of its n permits held by the first Locker.
func heldPermit(t *testing.T, tg *target, n int) (ctx context.Context, a, b *dlock.Locker, raw goredis.UniversalClient, name string, k layout.RedisSemaphore, held *dlock.Lease) {
	t.Helper()
	ctx = testCtx(t)
	a, b = open(t, ctx, tg.url), open(t, ctx, tg.url)
	raw = tg.raw[0]
	name = uniqueName(t)
	k = semKeys(name)
	held, err := semaphore(t, a, name, n).TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, a, b, raw, name, k, held
}

// TestSemaphoreAtMostN: 4 Lockers × 4 goroutines contend for 3 permits,
// each holding a permit briefly and releasing it: never more than 3
// holders at once (counted locally between a grant and its release, and
// on the server at every grant), 3 at once at some point (there was
// contention), every token distinct, and each goroutine's tokens strictly
// increasing.
func TestSemaphoreAtMostN(t *testing.T) {
	forSemaphores(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		const n, lockers, perLocker, rounds = 3, 4, 4, 15
		name := uniqueName(t)
		raw := tg.raw[0]
		var sems []*dlock.Semaphore
		for range lockers {
			sems = append(sems, semaphore(t, open(t, ctx, tg.url), name, n))
		}
		most, tokens := backendtest.SemaphoreAtMostN(ctx, t, backendtest.Contention{
			Sems: sems, N: n, Goroutines: perLocker, Rounds: rounds,
			Opts: &dlock.AcquireOptions{TTL: 10 * time.Second}, Hold: time.Millisecond,
			Held: func(ctx context.Context, _ *dlock.Lease) error {
				if c, err := raw.ZCard(ctx, semKeys(name).Holders).Result(); err != nil || c > n {
					return fmt.Errorf("%d holders on the server (%v)", c, err)
				}
				return nil
			},
		})
		if most != n {
			t.Errorf("at most %d holders at once, want %d", most, n)
		}
		if tokens != lockers*perLocker*rounds {
			t.Errorf("%d distinct tokens, want %d", tokens, lockers*perLocker*rounds)
		}
		// Every permit is free: nothing of the semaphore is left but its
		// fence and, for 3s at most, waiter registrations.
		k := semKeys(name)
		if c, err := raw.Exists(ctx, k.Holders, k.Tokens, k.Permits).Result(); err != nil || c != 0 {
			t.Errorf("%d of the holders, tokens and permits keys left after every release (%v)", c, err)
		}
	})
}

// TestSemaphoreKeys: the semaphore and the lock of one name are apart; a
// permit's keys share the name's slot and live at least as long as the
// latest holder's lease, and vanish with the last release.
func TestSemaphoreKeys(t *testing.T) {
	forSemaphores(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		l := open(t, ctx, tg.url)
		raw := tg.raw[0]
		name := uniqueName(t)
		lock, err := l.TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(ctx)
		sem := semaphore(t, l, name, 1)
		long, err := sem.TryAcquire(ctx, &dlock.AcquireOptions{TTL: 20 * time.Second})
		if err != nil {
			t.Fatalf("a permit of the semaphore while the lock of the same name is held: %v", err)
		}
		k := semKeys(name)
		lk := layout.RedisKeys(DefaultPrefix, name)
		for _, key := range []string{k.Holders, k.Tokens, k.Permits, k.Fence, k.Queue, k.Channel} {
			if keySlot(key) != keySlot(lk.Lock) {
				t.Errorf("%s: slot %d, the lock's %d", key, keySlot(key), keySlot(lk.Lock))
			}
			for _, lkey := range []string{lk.Lock, lk.Fence, lk.Queue, lk.Channel, lk.Waiters, lk.WaiterData} {
				if key == lkey {
					t.Errorf("semaphore key %s is a lock key", key)
				}
			}
		}
		if err := long.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// Two holders, the later with the shorter TTL: the keys keep the
		// longer one.
		sem2 := semaphore(t, l, name, 2)
		a, err := sem2.TryAcquire(ctx, &dlock.AcquireOptions{TTL: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		b, err := sem2.TryAcquire(ctx, &dlock.AcquireOptions{TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if b.Token() <= a.Token() {
			t.Errorf("tokens %d then %d", a.Token(), b.Token())
		}
		for _, key := range []string{k.Holders, k.Tokens, k.Permits} {
			if d, err := raw.PTTL(ctx, key).Result(); err != nil || d < 19*time.Second {
				t.Errorf("PTTL %s = %v (%v), want the longest lease's ~20s", key, d, err)
			}
		}
		if d, err := raw.TTL(ctx, k.Fence).Result(); err != nil || d != -1 {
			t.Errorf("TTL of the fence = %v (%v), want none (-1)", d, err)
		}
		if v, err := raw.Get(ctx, k.Permits).Result(); err != nil || v != "2" {
			t.Errorf("stored N = %q (%v), want 2", v, err)
		}
		for _, p := range []*dlock.Lease{a, b} {
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if c, err := raw.Exists(ctx, k.Holders, k.Tokens, k.Permits).Result(); err != nil || c != 0 {
			t.Errorf("%d keys left after the last release (%v)", c, err)
		}
	})
}

// TestSemaphoreMismatch: while a permit is held, an attempt with another
// N fails with ErrInvalidOption and changes nothing; once every permit is
// free, the next attempt's N applies.
func TestSemaphoreMismatch(t *testing.T) {
	forSemaphores(t, func(t *testing.T, tg *target) {
		ctx, a, b, raw, name, k, held := heldPermit(t, tg, 2)
		state := func() string {
			h, _ := raw.ZRange(ctx, k.Holders, 0, -1).Result()
			n, _ := raw.Get(ctx, k.Permits).Result()
			f, _ := raw.Get(ctx, k.Fence).Result()
			return fmt.Sprint(h, n, f)
		}
		before := state()
		three := semaphore(t, b, name, 3)
		for _, try := range []func(context.Context, *dlock.AcquireOptions) (*dlock.Lease, error){three.TryAcquire, three.Acquire} {
			_, err := try(ctx, nil)
			if !errors.Is(err, dlock.ErrInvalidOption) {
				t.Fatalf("a permit with N=3 while N=2 is in use: %v, want ErrInvalidOption", err)
			}
			t.Log(err)
		}
		if after := state(); after != before {
			t.Errorf("a refused attempt changed the semaphore: %s, then %s", before, after)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		p, err := three.TryAcquire(ctx, nil)
		if err != nil {
			t.Fatalf("N=3 once every permit is free: %v", err)
		}
		defer p.Release(ctx)
		if v, err := raw.Get(ctx, k.Permits).Result(); err != nil || v != "3" {
			t.Errorf("stored N = %q (%v), want 3", v, err)
		}
		if _, err := semaphore(t, a, name, 2).TryAcquire(ctx, nil); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("N=2 while N=3 is in use: %v", err)
		}
		// N lost while a permit is held (evicted): the next grant stores
		// it again, with the holders' expiry.
		if err := raw.Del(ctx, k.Permits).Err(); err != nil {
			t.Fatal(err)
		}
		q, err := three.TryAcquire(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Release(ctx)
		if v, err := raw.Get(ctx, k.Permits).Result(); err != nil || v != "3" {
			t.Errorf("stored N = %q (%v) after it was lost, want 3", v, err)
		}
		if d, err := raw.PTTL(ctx, k.Permits).Result(); err != nil || d <= 0 {
			t.Errorf("PTTL of the restored N = %v (%v)", d, err)
		}
	})
}

// driverOf opens a driver of its own (no portable layer: no keep-alive,
// no local deadline), to reach the server's view of leases.
func driverOf(t *testing.T, ctx context.Context, url string) *locker {
	t.Helper()
	d, err := openURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*locker)
}

// TestSemaphoreExpiry: a permit whose lease ran out is free (a crashed
// holder's comes back after its TTL), its refresh and release fail even
// before anyone took its place (it is not revived), and a refused attempt
// says when the first lease ends. A foreign value neither refreshes nor
// releases a holder's permit.
func TestSemaphoreExpiry(t *testing.T) {
	forSemaphores(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		d := driverOf(t, ctx, tg.url)
		raw := tg.raw[0]
		name := uniqueName(t)
		k := semKeys(name)
		req := driver.Request{Name: name, TTL: 300 * time.Millisecond, Permits: 1}
		crashed, err := d.TryAcquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.TryAcquire(ctx, req)
		var na *driver.NotAcquiredError
		if !errors.As(err, &na) || na.RetryAfter <= 0 || na.RetryAfter > 300*time.Millisecond {
			t.Fatalf("TryAcquire of a full semaphore: %v, want ErrNotAcquired with RetryAfter in (0, 300ms]", err)
		}
		time.Sleep(400 * time.Millisecond)
		// The only holder expired: so did the semaphore's keys.
		if c, err := raw.Exists(ctx, k.Holders, k.Tokens, k.Permits).Result(); err != nil || c != 0 {
			t.Errorf("%d keys left after the only holder's TTL (%v)", c, err)
		}
		if err := crashed.Refresh(ctx, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Refresh of an expired permit: %v, want ErrNotHeld", err)
		}
		if err := crashed.Release(ctx); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Release of an expired permit: %v, want ErrNotHeld", err)
		}
		next, err := d.TryAcquire(ctx, req)
		if err != nil {
			t.Fatalf("a permit after the holder's TTL: %v", err)
		}
		if next.Token() <= crashed.Token() {
			t.Errorf("token %d after %d", next.Token(), crashed.Token())
		}
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// Two permits, one held for a minute (which keeps the keys): a
		// holder that expired is not revived by its refresh, nor freed
		// by its release, before anyone trimmed it; the next attempt
		// trims it (and its token entry) and takes its place.
		long := driver.Request{Name: name, TTL: time.Minute, Permits: 2}
		short := driver.Request{Name: name, TTL: 200 * time.Millisecond, Permits: 2}
		first, err := d.TryAcquire(ctx, long)
		if err != nil {
			t.Fatal(err)
		}
		defer first.Release(ctx)
		for _, end := range []func(driver.Lease) error{
			func(p driver.Lease) error { return p.Refresh(ctx, time.Minute) },
			func(p driver.Lease) error { return p.Release(ctx) },
		} {
			expiring, err := d.TryAcquire(ctx, short)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			if c, _ := raw.ZCard(ctx, k.Holders).Result(); c != 2 {
				t.Fatalf("%d holders before anyone trims the expired one, want 2", c)
			}
			if err := end(expiring); !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("Refresh or Release of an expired permit: %v, want ErrNotHeld", err)
			}
			if c, _ := raw.ZCard(ctx, k.Holders).Result(); c != 1 {
				t.Errorf("%d holders after it, want 1", c)
			}
		}
		expiring, err := d.TryAcquire(ctx, short)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		taker, err := d.TryAcquire(ctx, long)
		if err != nil {
			t.Fatalf("a permit whose holder expired while another holds: %v", err)
		}
		defer taker.Release(ctx)
		if n, _ := raw.HLen(ctx, k.Tokens).Result(); n != 2 {
			t.Errorf("%d token entries for 2 holders: the expired holder's was not trimmed", n)
		}
		if err := expiring.Refresh(ctx, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Refresh of a permit trimmed after its expiry: %v", err)
		}
		// A foreign value (another grant's) is refused and harms nobody.
		foreign := &semLease{l: d, n: first.(*semLease).n, value: "foreign|", valueArg: "foreign|"}
		if err := foreign.Refresh(ctx, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Refresh of a foreign value: %v", err)
		}
		if err := foreign.Release(ctx); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Release of a foreign value: %v", err)
		}
		if c, _ := raw.ZCard(ctx, k.Holders).Result(); c != 2 {
			t.Errorf("%d holders after a foreign refresh and release, want 2", c)
		}
		if err := first.Refresh(ctx, time.Minute); err != nil {
			t.Errorf("Refresh of a live permit: %v", err)
		}
	})
}

// TestSemaphoreCancelLeavesNothing: an Acquire whose ctx ends while every
// permit is held leaves no holder and, within a second (well before the
// registration's own 3s expiry), no registration of its Locker.
func TestSemaphoreCancelLeavesNothing(t *testing.T) {
	forSemaphores(t, func(t *testing.T, tg *target) {
		ctx, _, b, raw, name, k, held := heldPermit(t, tg, 1)
		sem := semaphore(t, b, name, 1)
		id := b.Driver().(*locker).semHub.id
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := sem.Acquire(cctx, nil)
			done <- err
		}()
		// The waiter registered its Locker (a release would wake it).
		waitFor(t, "the waiter's registration", func() bool {
			_, err := raw.ZScore(ctx, k.Queue, id).Result()
			return err == nil
		})
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire with a cancelled context: %v", err)
		}
		start := time.Now()
		waitFor(t, "the registration's removal", func() bool {
			_, err := raw.ZScore(ctx, k.Queue, id).Result()
			return errors.Is(err, goredis.Nil)
		})
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("registration removed after %v: it expired rather than being removed", d)
		}
		if h, _ := raw.ZRange(ctx, k.Holders, 0, -1).Result(); len(h) != 1 {
			t.Errorf("holders %v after a cancelled Acquire, want the one holder", h)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if c, err := raw.Exists(ctx, k.Holders, k.Tokens, k.Permits, k.Queue).Result(); err != nil || c != 0 {
			t.Errorf("%d keys left (%v)", c, err)
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSemaphoreWatchWakes: a waiter whose attempt failed after Watch
// returned is woken by a release (the driver has no timer: only the
// release's message can wake it), for fresh names and for names watched
// before; and a release with no waiter registered publishes nothing.
func TestSemaphoreWatchWakes(t *testing.T) {
	forSemaphores(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		w := driverOf(t, ctx, tg.url)
		other := driverOf(t, ctx, tg.url)
		base := uniqueName(t)
		for i := range 20 {
			name := base + "/" + string(rune('a'+i%10))
			req := driver.Request{Name: name, TTL: 10 * time.Second, Permits: 2}
			var held []driver.Lease
			for range 2 {
				p, err := other.TryAcquire(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, p)
			}
			wake, stop, err := w.Watch(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.TryAcquire(ctx, req); !errors.Is(err, driver.ErrNotAcquired) {
				t.Fatalf("TryAcquire of a full semaphore: %v", err)
			}
			if err := held[0].Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-wake:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: no wake-up within 5s of a release", i)
			}
			stop()
			if err := held[1].Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := w.Watch(ctx, driver.Request{Name: base}); !errors.Is(err, driver.ErrUnsupported) {
			t.Errorf("Watch of a lock: %v, want ErrUnsupported (locks wait in the grant queue)", err)
		}
	})
}

// TestSemaphoreMaxPermits: a semaphore of MaxPermits permits holds that
// many (the other MaxPermits-1 holders are written behind the driver's
// back), and one more is refused before any server call.
func TestSemaphoreMaxPermits(t *testing.T) {
	forSemaphores(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		l := open(t, ctx, tg.url)
		raw := tg.raw[0]
		name := uniqueName(t)
		k := semKeys(name)
		if got := l.Capabilities().MaxPermits; got != MaxPermits {
			t.Fatalf("MaxPermits %d, want %d", got, MaxPermits)
		}
		if _, err := l.Semaphore(name, MaxPermits+1); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Fatalf("MaxPermits+1: %v", err)
		}
		sem := semaphore(t, l, name, MaxPermits)
		first, err := sem.TryAcquire(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer first.Release(ctx)
		far := float64(time.Now().Add(time.Hour).UnixMilli())
		zs := make([]goredis.Z, MaxPermits-2)
		for i := range zs {
			zs[i] = goredis.Z{Score: far, Member: "other" + strconv.Itoa(i)}
		}
		if err := raw.ZAdd(ctx, k.Holders, zs...).Err(); err != nil {
			t.Fatal(err)
		}
		defer raw.Del(ctx, k.Holders, k.Tokens, k.Permits)
		last, err := sem.TryAcquire(ctx, nil)
		if err != nil {
			t.Fatalf("permit %d of %d: %v", MaxPermits, MaxPermits, err)
		}
		defer last.Release(ctx)
		if _, err := sem.TryAcquire(ctx, nil); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("permit %d of %d: %v, want ErrNotAcquired", MaxPermits+1, MaxPermits, err)
		}
		if c, _ := raw.ZCard(ctx, k.Holders).Result(); c != MaxPermits {
			t.Errorf("%d holders, want %d", c, MaxPermits)
		}
	})
}

// TestRedlockSemaphoreUnsupported: Redlock declares no semaphores.
func TestRedlockSemaphoreUnsupported(t *testing.T) {
	tg := redlockTarget(t, 3)
	l := open(t, testCtx(t), tg.url)
	if l.Capabilities().MaxPermits != 0 {
		t.Fatalf("Redlock declares MaxPermits %d", l.Capabilities().MaxPermits)
	}
	if _, err := l.Semaphore("x", 2); !errors.Is(err, dlock.ErrUnsupported) {
		t.Fatalf("Semaphore on Redlock: %v, want ErrUnsupported", err)
	}
}

// TestSemaphoreCommands counts the server commands of a permit's
// TryAcquire and Release, without a waiter, from INFO commandstats: one
// script each (the commands they run counted apart), nothing published.
func TestSemaphoreCommands(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := testCtx(t)
	l := open(t, ctx, srv.URL)
	raw := rawClient(t, srv.Addr)
	sem := semaphore(t, l, uniqueName(t), 4)
	opts := &dlock.AcquireOptions{NoKeepAlive: true}
	cycle := func() {
		p, err := sem.TryAcquire(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // scripts loaded, eviction policy checked
	const cycles = 10
	before := commandStats(t, ctx, raw)
	for range cycles {
		cycle()
	}
	after := commandStats(t, ctx, raw)
	per := map[string]float64{}
	total := 0.0
	for cmd, n := range after {
		if d := n - before[cmd]; d > 0 && cmd != "info" {
			per[cmd] = float64(d) / cycles
			total += per[cmd]
		}
	}
	t.Logf("per TryAcquire+Release of a free permit: %v commands: %v", total, per)
	if per["evalsha"] != 2 || per["eval"] != 0 {
		t.Errorf("%v EVALSHA and %v EVAL per cycle, want 2 and 0", per["evalsha"], per["eval"])
	}
	if total != 20 {
		t.Errorf("%v commands per cycle; doc.go (Semaphores) says 2 EVALSHA and 18 inside them", total)
	}
	if per["publish"] != 0 {
		t.Errorf("%v PUBLISH per cycle with nobody waiting", per["publish"])
	}
}

// BenchmarkSemaphoreCycle: TryAcquire and Release of a free permit (N=4)
// on a single server, beside the same cycle of a lock, alternating in
// short slices in one process.
func BenchmarkSemaphoreCycle(b *testing.B) {
	ctx := context.Background()
	srv := testenv.Redis(b)
	l, err := dlock.Open(ctx, srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	name := "bench/semaphore/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	sem, err := l.Semaphore(name, 4)
	if err != nil {
		b.Fatal(err)
	}
	opts := &dlock.AcquireOptions{NoKeepAlive: true}
	run := func(b *testing.B, try func() (*dlock.Lease, error)) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := try()
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	permit := func() (*dlock.Lease, error) { return sem.TryAcquire(ctx, opts) }
	lock := func() (*dlock.Lease, error) { return l.TryAcquire(ctx, name, opts) }
	b.Run("permit", func(b *testing.B) { run(b, permit) })
	b.Run("lock", func(b *testing.B) { run(b, lock) })
	// Both cycles in turn, each timed: the medians compare them under the
	// same load.
	b.Run("alternating", func(b *testing.B) {
		var ds [2][]time.Duration
		for b.Loop() {
			for i, try := range []func() (*dlock.Lease, error){permit, lock} {
				start := time.Now()
				p, err := try()
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Release(ctx); err != nil {
					b.Fatal(err)
				}
				ds[i] = append(ds[i], time.Since(start))
			}
		}
		for i, unit := range []string{"permit-µs/cycle", "lock-µs/cycle"} {
			slices.Sort(ds[i])
			b.ReportMetric(float64(ds[i][len(ds[i])/2])/float64(time.Microsecond), unit)
		}
	})
}
