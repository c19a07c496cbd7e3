package zookeeper

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/testenv"
)

func TestParsePermit(t *testing.T) {
	g := strings.Repeat("cd", 16)
	for _, c := range []struct {
		name    string
		permits int
		seq     int64
	}{
		{permitPrefix(g, 4) + "0000000042", 4, 42},
		{permitPrefix(g, 256) + "0000000001", 256, 1},
		{permitPrefix(g, 1) + "-2147483648", 1, -2147483648},
		{childPrefix(g) + "0000000007", 0, 7},
		{childPrefix(g) + "-0000000007", 0, -7},
	} {
		guid, n, seq, ok := parseProtected(c.name)
		if !ok || guid != g || n != c.permits || seq != c.seq {
			t.Errorf("parseProtected(%q) = %q %d %d %v", c.name, guid, n, seq, ok)
		}
	}
	for _, bad := range []string{"_c_" + g + "-sem-1", "_c_" + g + "-sem0-1", "_c_" + g + "-sem04-1", "_c_" + g + "-semx-1", "_c_" + g + "-sem4", "_c_" + g + "-sem4-x", "_c_" + g + "-lock"} {
		if _, _, _, ok := parseProtected(bad); ok {
			t.Errorf("parseProtected(%q) ok", bad)
		}
	}
}

// semSetup opens k Lockers on the shared server under a fresh prefix.
func semSetup(t *testing.T, k int, d time.Duration) ([]*dlock.Locker, *zk.Conn, string, context.Context) {
	srv, admin, prefix, ctx := setup(t, d)
	var ls []*dlock.Locker
	for range k {
		ls = append(ls, open(t, srv.URL, prefix, ""))
	}
	return ls, admin, prefix, ctx
}

func semaphore(t testing.TB, l *dlock.Locker, name string, n int) *dlock.Semaphore {
	t.Helper()
	s, err := l.Semaphore(name, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// permits returns the children of the semaphore name's parent.
func permits(t testing.TB, admin *zk.Conn, prefix, name string) []string {
	t.Helper()
	k, _, err := admin.Children(layout.ZooKeeperSemaphoreParent(prefix, name))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSemaphoreAtMostN: three Lockers, three goroutines each, on a
// semaphore of 2 permits (with both recipes: semaphores queue alike).
// Never more than 2 holders at once, and 2 at once is reached; each
// goroutine's successive tokens increase; no token is granted twice.
func TestSemaphoreAtMostN(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		const n = 2
		var sems []*dlock.Semaphore
		for range 3 {
			sems = append(sems, semaphore(t, open(t, srv.URL, prefix, "recipe="+recipe), "pool", n))
		}
		most, _ := backendtest.SemaphoreAtMostN(testenv.Context(t, time.Minute), t, backendtest.Contention{
			Sems: sems, N: n, Goroutines: 3, Rounds: 15, Hold: 2 * time.Millisecond,
		})
		if most != n {
			t.Errorf("at most %d holders at once, want %d", most, n)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestSemaphoreWindowWakeup is the wake-up that watching only the node N
// ahead misses: N = 2, the queue [a, b, w]; b is released (not a), and w
// must be granted.
func TestSemaphoreWindowWakeup(t *testing.T) {
	ls, admin, prefix, ctx := semSetup(t, 3, 30*time.Second)
	a, err := semaphore(t, ls[0], "s", 2).Acquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := semaphore(t, ls[1], "s", 2).Acquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		p, err := semaphore(t, ls[2], "s", 2).Acquire(ctx, nil)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitChildren(t, admin, prefix, "s", 3)
	select {
	case <-got:
		t.Fatal("granted a third permit of 2")
	case <-time.After(100 * time.Millisecond):
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var w *dlock.Lease
	select {
	case w = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter was not woken by the release of the second holder")
	}
	if w == nil {
		t.FailNow()
	}
	if w.Token() <= b.Token() || w.Token() <= a.Token() {
		t.Errorf("token %d after %d and %d", w.Token(), a.Token(), b.Token())
	}
	for _, p := range []*dlock.Lease{a, w} {
		if err := p.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	assertNoOrphans(t, admin, prefix)
}

// waitChildren waits until the semaphore name has k nodes.
func waitChildren(t *testing.T, admin *zk.Conn, prefix, name string, k int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(permits(t, admin, prefix, name)) != k {
		if time.Now().After(deadline) {
			t.Fatalf("semaphore %q: children %v, want %d", name, permits(t, admin, prefix, name), k)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSemaphoreFIFO: with one permit held, waiters are granted in arrival
// order (Capabilities.SemaphoreFair), each woken by one release.
func TestSemaphoreFIFO(t *testing.T) {
	ls, admin, prefix, ctx := semSetup(t, 4, 30*time.Second)
	const n = 2
	var held []*dlock.Lease
	for i := range n {
		p, err := semaphore(t, ls[0], "fifo", n).Acquire(ctx, nil)
		if err != nil {
			t.Fatal(i, err)
		}
		held = append(held, p)
	}
	order := make(chan int, 3)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := semaphore(t, ls[i], "fifo", n).Acquire(wctx, nil)
			if err != nil {
				if wctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			order <- i
			<-wctx.Done()
			_ = p.Release(context.Background())
		}()
		waitChildren(t, admin, prefix, "fifo", n+i)
	}
	// Each release of one of the test's permits grants the next waiter.
	for i := 1; i <= n; i++ {
		if err := held[i-1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := <-order; got != i {
			t.Fatalf("waiter %d granted, want %d", got, i)
		}
	}
	select {
	case got := <-order:
		t.Fatalf("waiter %d granted with no permit free", got)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestSemaphoreMismatch: while a permit is held or waited for, an attempt
// with another number of permits is refused and changes nothing; once all
// are free, the next attempt's number applies.
func TestSemaphoreMismatch(t *testing.T) {
	ls, admin, prefix, ctx := semSetup(t, 3, 30*time.Second)
	two := semaphore(t, ls[0], "m", 2)
	p1, err := two.Acquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	three := semaphore(t, ls[1], "m", 3)
	refused := func(why string) {
		t.Helper()
		before := permits(t, admin, prefix, "m")
		if _, err := three.TryAcquire(ctx, nil); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("%s: TryAcquire with 3 permits: %v, want ErrInvalidOption", why, err)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := three.Acquire(actx, nil)
		cancel()
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("%s: Acquire with 3 permits: %v, want ErrInvalidOption", why, err)
		} else if !strings.Contains(err.Error(), "2 permits") {
			t.Errorf("%s: the error does not say the stored number: %v", why, err)
		}
		if after := permits(t, admin, prefix, "m"); !slices.Equal(before, after) {
			t.Errorf("%s: children %v, then %v", why, before, after)
		}
	}
	refused("one permit held")
	p2, err := semaphore(t, ls[2], "m", 2).Acquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter with 2 permits, both held.
	waiter := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	go func() { _, err := two.Acquire(wctx, nil); waiter <- err }()
	waitChildren(t, admin, prefix, "m", 3)
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	stop()
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	refused("one permit held by the granted waiter")
	// Only waiters left: still in use.
	held := permits(t, admin, prefix, "m")
	if len(held) != 1 {
		t.Fatalf("children %v, want the granted waiter's", held)
	}
	if err := admin.Delete(layout.ZooKeeperSemaphoreParent(prefix, "m")+"/"+held[0], -1); err != nil {
		t.Fatal(err)
	}
	// All free: 3 applies now.
	var ps []*dlock.Lease
	for range 3 {
		p, err := three.TryAcquire(ctx, nil)
		if err != nil {
			t.Fatalf("all free, 3 permits: %v", err)
		}
		ps = append(ps, p)
	}
	if _, err := two.TryAcquire(ctx, nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("2 permits while 3 are held: %v", err)
	}
	for _, p := range ps {
		_ = p.Release(ctx)
	}
	assertNoOrphans(t, admin, prefix)
}

// TestSemaphoreCancelLeavesNothing: a TryAcquire that finds every permit
// taken and a cancelled Acquire leave no node.
func TestSemaphoreCancelLeavesNothing(t *testing.T) {
	ls, admin, prefix, ctx := semSetup(t, 2, 30*time.Second)
	var held []*dlock.Lease
	for range 2 {
		p, err := semaphore(t, ls[0], "c", 2).TryAcquire(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	sem := semaphore(t, ls[1], "c", 2)
	if _, err := sem.TryAcquire(ctx, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire of a full semaphore: %v", err)
	}
	if k := permits(t, admin, prefix, "c"); len(k) != 2 {
		t.Errorf("after TryAcquire: children %v, want the 2 holders", k)
	}
	for _, d := range []time.Duration{0, time.Millisecond, 50 * time.Millisecond} {
		cctx, cancel := context.WithTimeout(ctx, d)
		_, err := sem.Acquire(cctx, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled acquire: %v", err)
		}
		if k := permits(t, admin, prefix, "c"); len(k) != 2 {
			t.Errorf("after a cancelled Acquire (%v): children %v, want the 2 holders", d, k)
		}
	}
	for _, p := range held {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	assertNoOrphans(t, admin, prefix)
}

// TestSemaphoreRevokedPermit: a permit whose node goes (as when its
// session expires) is reported lost and its permit goes to a waiter; a
// holder whose session is closed frees its permit at once.
func TestSemaphoreRevokedPermit(t *testing.T) {
	srv, admin, prefix, ctx := setup(t, 30*time.Second)
	a := open(t, srv.URL, prefix, "")
	b := open(t, srv.URL, prefix, "")
	p, err := semaphore(t, a, "r", 1).Acquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		q, err := semaphore(t, b, "r", 1).Acquire(ctx, nil)
		if err != nil {
			t.Error(err)
		}
		got <- q
	}()
	waitChildren(t, admin, prefix, "r", 2)
	k := permits(t, admin, prefix, "r")
	slices.SortFunc(k, func(x, y string) int { _, sx, _ := parseChild(x); _, sy, _ := parseChild(y); return int(sx - sy) })
	if err := admin.Delete(layout.ZooKeeperSemaphoreParent(prefix, "r")+"/"+k[0], -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		if !errors.Is(p.Err(), dlock.ErrLockLost) {
			t.Errorf("revoked permit: Err %v", p.Err())
		}
	case <-ctx.Done():
		t.Fatal("the revoked permit was not reported lost")
	}
	var q *dlock.Lease
	select {
	case q = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter was not granted the revoked permit")
	}
	if q == nil {
		t.FailNow()
	}
	if q.Token() <= p.Token() {
		t.Errorf("token %d after %d", q.Token(), p.Token())
	}

	// A session closed without a release frees its permit.
	conn, _, err := zk.Connect([]string{srv.Addr}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(discardLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenLocker(conn, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wait := make(chan error, 1)
	go func() { _, err := semaphore(t, c, "r", 1).Acquire(ctx, nil); wait <- err }()
	waitChildren(t, admin, prefix, "r", 2)
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wait; err != nil {
		t.Fatal(err)
	}
	conn.Close() // the holder's session ends: its permit is free
	r, err := semaphore(t, a, "r", 1).Acquire(ctx, nil)
	if err != nil {
		t.Fatalf("after the holder's session closed: %v", err)
	}
	_ = r.Release(ctx)
	assertNoOrphans(t, admin, prefix)
}

// TestSemaphoreApartFromLock: the semaphore "x" and the lock "x" are held
// at once, by different Lockers.
func TestSemaphoreApartFromLock(t *testing.T) {
	ls, admin, prefix, ctx := semSetup(t, 2, 30*time.Second)
	lock, err := ls[0].Acquire(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := semaphore(t, ls[1], "x", 1).TryAcquire(ctx, nil)
	if err != nil {
		t.Fatalf("semaphore x while the lock x is held: %v", err)
	}
	if _, err := ls[1].TryAcquire(ctx, "x", nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("the lock x while held: %v", err)
	}
	_ = p.Release(ctx)
	_ = lock.Release(ctx)
	assertNoOrphans(t, admin, prefix)
}

// TestSemaphoreMaxPermits: a semaphore of MaxPermits holds that many
// permits at once, and no more; one more permit is refused before any
// server call.
func TestSemaphoreMaxPermits(t *testing.T) {
	ls, admin, prefix, ctx := semSetup(t, 1, time.Minute)
	if got := ls[0].Capabilities().MaxPermits; got != MaxPermits {
		t.Fatalf("Capabilities.MaxPermits %d, want %d", got, MaxPermits)
	}
	if _, err := ls[0].Semaphore("max", MaxPermits+1); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("%d permits: %v", MaxPermits+1, err)
	}
	sem := semaphore(t, ls[0], "max", MaxPermits)
	var held []*dlock.Lease
	for i := range MaxPermits {
		p, err := sem.TryAcquire(ctx, &dlock.AcquireOptions{NoKeepAlive: true})
		if err != nil {
			t.Fatalf("permit %d of %d: %v", i+1, MaxPermits, err)
		}
		held = append(held, p)
	}
	if _, err := sem.TryAcquire(ctx, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("permit %d of %d: %v", MaxPermits+1, MaxPermits, err)
	}
	for _, p := range held {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	assertNoOrphans(t, admin, prefix)
}
