package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

var prefixSeq atomic.Int64

// testPrefix returns a fresh prefix per test, so tests sharing a server do
// not see each other's locks.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("/dlocktest/%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid(), prefixSeq.Add(1))
}

// open opens a Locker on url (a zk:// URL without path) under prefix.
func open(t testing.TB, url, prefix, query string) *dlock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u := url + prefix
	if query != "" {
		u += "?" + query
	}
	l, err := dlock.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// adminConn is a separate session for looking at (and meddling with) the
// server's state.
func adminConn(t testing.TB, addrs ...string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(discardLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.Now().Add(20 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatal("admin connection: no session")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c
}

// kids returns the children of the lock name's parent (none when it does
// not exist).
func kids(t testing.TB, admin *zk.Conn, prefix, name string) []string {
	t.Helper()
	k, _, err := admin.Children(prefix + "/" + escapeName(name))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// assertNoOrphans checks that no lock node is left anywhere under prefix.
func assertNoOrphans(t testing.TB, admin *zk.Conn, prefix string) {
	t.Helper()
	names, _, err := admin.Children(prefix)
	if errors.Is(err, zk.ErrNoNode) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range names {
		for {
			k, _, err := admin.Children(prefix + "/" + n)
			if errors.Is(err, zk.ErrNoNode) || (err == nil && len(k) == 0) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("orphan znodes under %s/%s: %v (%v)", prefix, n, k, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// setup returns the shared server, an administrator's session on it, a
// fresh prefix and a context that ends after d.
func setup(t *testing.T, d time.Duration) (*testenv.Server, *zk.Conn, string, context.Context) {
	srv := testenv.ZooKeeper(t)
	return srv, adminConn(t, srv.Addr), testPrefix(t), testenv.Context(t, d)
}

// forRecipes runs f as a subtest per recipe, on the shared server, with an
// administrator's session and a fresh prefix.
func forRecipes(t *testing.T, f func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string)) {
	srv := testenv.ZooKeeper(t)
	admin := adminConn(t, srv.Addr)
	for _, recipe := range []string{RecipeFair, RecipeBasic} {
		t.Run(recipe, func(t *testing.T) { f(t, srv, admin, testPrefix(t), recipe) })
	}
}

// expectHeld checks that l cannot take name.
func expectHeld(t testing.TB, ctx context.Context, l *dlock.Locker, name, why string) {
	t.Helper()
	if _, err := l.TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("%s: TryAcquire of a held lock returned %v, want ErrNotAcquired", why, err)
	}
}

func TestAcquireReleaseBothRecipes(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		l := open(t, srv.URL, prefix, "recipe="+recipe)
		ctx := testenv.Context(t, 30*time.Second)
		var last uint64
		for _, name := range trickyNames {
			ls, err := l.Acquire(ctx, name, nil)
			if err != nil {
				t.Fatalf("acquire %q: %v", name, err)
			}
			if ls.Token() <= last {
				t.Errorf("token %d after %d", ls.Token(), last)
			}
			last = ls.Token()
			info, err := l.Inspect(ctx, name)
			if err != nil || !info.Held || info.Fence != ls.Token() {
				t.Errorf("inspect %q: %+v %v (token %d)", name, info, err, ls.Token())
			}
			if k := kids(t, admin, prefix, name); len(k) != 1 {
				t.Errorf("%q: children %v, want one", name, k)
			}
			if err := ls.Refresh(ctx); err != nil {
				t.Errorf("refresh %q: %v", name, err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Errorf("release %q: %v", name, err)
			}
			if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("second release: %v", err)
			}
		}
		caps := l.Capabilities()
		if !caps.SessionBound || !caps.Fencing || caps.Fair != (recipe == RecipeFair) || caps.ReleaseOnCrash != DefaultSessionTimeout {
			t.Errorf("capabilities %+v", caps)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

func TestTryAcquireAndCancelLeaveNothing(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		a := open(t, srv.URL, prefix, "recipe="+recipe)
		b := open(t, srv.URL, prefix, "recipe="+recipe)
		ctx := testenv.Context(t, 30*time.Second)
		held, err := a.Acquire(ctx, "x", &dlock.AcquireOptions{Owner: "a"})
		if err != nil {
			t.Fatal(err)
		}
		expectHeld(t, ctx, b, "x", "held by a")
		if k := kids(t, admin, prefix, "x"); len(k) != 1 {
			t.Errorf("after TryAcquire: children %v, want the holder only", k)
		}
		for _, d := range []time.Duration{0, time.Millisecond, 50 * time.Millisecond} {
			cctx, cancel := context.WithTimeout(ctx, d)
			_, err := b.Acquire(cctx, "x", nil)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("cancelled acquire: %v", err)
			}
			if k := kids(t, admin, prefix, "x"); len(k) != 1 {
				t.Errorf("after a cancelled Acquire (%v): children %v, want the holder only", d, k)
			}
		}
		info, err := b.Inspect(ctx, "x")
		if err != nil || !info.Held || info.Owner != "a" {
			t.Errorf("inspect: %+v %v", info, err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		ls, err := b.TryAcquire(ctx, "x", nil)
		if err != nil {
			t.Fatalf("try-acquire of a free lock: %v", err)
		}
		_ = ls.Release(ctx)
		assertNoOrphans(t, admin, prefix)
	})
}

// TestFairOrder: waiters are granted in arrival order, and every token is
// greater than the last.
func TestFairOrder(t *testing.T) {
	srv, admin, prefix, ctx := setup(t, 60*time.Second)
	holder := open(t, srv.URL, prefix, "")
	first, err := holder.Acquire(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	order := make(chan int, n)
	tokens := make(chan uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		l := open(t, srv.URL, prefix, "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := l.Acquire(ctx, "q", nil)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			tokens <- ls.Token()
			time.Sleep(5 * time.Millisecond)
			_ = ls.Release(ctx)
		}()
		// Wait until its node is queued, so arrival order is known.
		for len(kids(t, admin, prefix, "q")) != i+2 {
			if ctx.Err() != nil {
				t.Fatal("waiter never queued")
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	last := first.Token()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	close(tokens)
	want := 0
	for i := range order {
		if i != want {
			t.Errorf("granted waiter %d, want %d", i, want)
		}
		want++
	}
	for tok := range tokens {
		if tok <= last {
			t.Errorf("token %d not above %d", tok, last)
		}
		last = tok
	}
	assertNoOrphans(t, admin, prefix)
}

// TestMutualExclusion hammers one name from several Lockers (both recipes).
func TestMutualExclusion(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		ctx := testenv.Context(t, 60*time.Second)
		var inside atomic.Int32
		var grants atomic.Int32
		var mu sync.Mutex
		var last uint64
		var wg sync.WaitGroup
		for range 4 {
			l := open(t, srv.URL, prefix, "recipe="+recipe)
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 15 {
						ls, err := l.Acquire(ctx, "m", nil)
						if err != nil {
							t.Error(err)
							return
						}
						if inside.Add(1) != 1 {
							t.Error("two holders at once")
						}
						mu.Lock()
						if ls.Token() <= last {
							t.Errorf("token %d not above %d", ls.Token(), last)
						}
						last = ls.Token()
						mu.Unlock()
						grants.Add(1)
						inside.Add(-1)
						if err := ls.Release(ctx); err != nil {
							t.Error(err)
						}
					}
				}()
			}
		}
		wg.Wait()
		if grants.Load() != 4*2*15 {
			t.Errorf("%d grants", grants.Load())
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestRevokedHolder: deleting the holder's node (as an administrator would)
// ends its lease and grants the next waiter.
func TestRevokedHolder(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		ctx := testenv.Context(t, 30*time.Second)
		a := open(t, srv.URL, prefix, "recipe="+recipe)
		b := open(t, srv.URL, prefix, "recipe="+recipe)
		ls, err := a.Acquire(ctx, "r", nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *dlock.Lease, 1)
		go func() {
			l2, err := b.Acquire(ctx, "r", nil)
			if err != nil {
				t.Error(err)
			}
			got <- l2
		}()
		time.Sleep(100 * time.Millisecond)
		for _, k := range kids(t, admin, prefix, "r") {
			p := prefix + "/" + escapeName("r") + "/" + k
			if _, st, err := admin.Get(p); err == nil && uint64(st.Czxid) == ls.Token() {
				if err := admin.Delete(p, -1); err != nil {
					t.Fatal(err)
				}
			}
		}
		select {
		case <-ls.Done():
			if !errors.Is(ls.Err(), dlock.ErrLockLost) {
				t.Errorf("lease err %v", ls.Err())
			}
		case <-ctx.Done():
			t.Fatal("revoked lease never ended")
		}
		l2 := <-got
		if l2 == nil {
			t.FailNow()
		}
		if l2.Token() <= ls.Token() {
			t.Errorf("token %d not above %d", l2.Token(), ls.Token())
		}
		if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("release of a revoked lease: %v", err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Error(err)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestOpenLocker uses a connection the test opened: Close leaves it open,
// a revocation is noticed, and a broken session is reported.
func TestOpenLocker(t *testing.T) {
	srv, admin, prefix, ctx := setup(t, 30*time.Second)
	conn, events, err := zk.Connect([]string{srv.Addr}, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(discardLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	l, err := OpenLocker(conn, &Options{Prefix: prefix, SessionTimeout: 4 * time.Second, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := l.Acquire(ctx, "own", &dlock.AcquireOptions{Owner: "me"})
	if err != nil {
		t.Fatal(err)
	}
	if caps := l.Capabilities(); caps.ReleaseOnCrash != 4*time.Second {
		t.Errorf("ReleaseOnCrash %v", caps.ReleaseOnCrash)
	}
	k := kids(t, admin, prefix, "own")
	if len(k) != 1 {
		t.Fatalf("children %v", k)
	}
	if err := admin.Delete(prefix+"/"+escapeName("own")+"/"+k[0], -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ls.Done():
	case <-ctx.Done():
		t.Fatal("revocation not noticed")
	}
	ls2, err := l.TryAcquire(ctx, "own", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ls2.Token() <= ls.Token() {
		t.Errorf("token %d not above %d", ls2.Token(), ls.Token())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.Exists("/"); err != nil {
		t.Errorf("the user's connection is unusable after Locker.Close: %v", err)
	}
	assertNoOrphans(t, admin, prefix)

	// A bad option is OpenLocker's error, wrapping ErrInvalidOption.
	if bad, err := OpenLocker(conn, &Options{Prefix: "/zookeeper/x"}); bad != nil || !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("bad prefix: %v, %v, want a nil Locker and ErrInvalidOption", bad, err)
	}
}

// TestDigestAuth opens with zk://user:password@...: nodes are created for
// that identity only, and the password appears in no error.
func TestDigestAuth(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	// Its own top-level node: the prefix is created with alice's ACL.
	prefix := strings.Replace(testPrefix(t), "/dlocktest/", "/dlocktest-auth/", 1)
	ctx := testenv.Context(t, 30*time.Second)
	u := "zk://alice:s3cr3t-pw@" + srv.Addr + prefix
	l, err := dlock.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.Acquire(ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Someone without the credentials cannot see or delete the queue.
	stranger := adminConn(t, srv.Addr)
	if _, _, err := stranger.Children(prefix + "/" + escapeName("a")); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("an unauthenticated client listed the queue: %v", err)
	}
	// The same identity in another session can contend.
	l2, err := dlock.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	expectHeld(t, ctx, l2, "a", "second session of the same user")
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = dlock.Open(ctx, "zk://alice:s3cr3t-pw@127.0.0.1:1/x?connect_timeout=200ms")
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("open of an unreachable server: %v (must fail without showing the password)", err)
	}
}

// TestFreshNameCostsOneTransactionMore: the first lock of a name never
// used before costs exactly one server transaction more than a lock of a
// name in use (its parent's create), not a failed create besides (which
// the server logs as a transaction, and pays a round trip for). zxids
// count the transactions; the smallest of a few tries is taken, so that
// another session's write in between does not count.
func TestFreshNameCostsOneTransactionMore(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		l := open(t, srv.URL, prefix, "recipe="+recipe)
		ctx := testenv.Context(t, 30*time.Second)
		use := func(name string) {
			ls, err := l.Acquire(ctx, name, nil)
			if err != nil {
				t.Fatalf("acquire %q: %v", name, err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatalf("release %q: %v", name, err)
			}
		}
		use("warm") // the prefix (and the probe's parent) exist from here on
		probe := prefix + "-probe"
		if _, err := admin.Create(probe, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(probe, -1) })
		zxid := func() int64 {
			st, err := admin.Set(probe, nil, -1)
			if err != nil {
				t.Fatal(err)
			}
			return st.Mzxid
		}
		txns := func(name func(i int) string) int64 {
			best := int64(math.MaxInt64)
			for i := range 3 {
				before := zxid()
				use(name(i))
				best = min(best, zxid()-before-1) // -1: the probe's own write
			}
			return best
		}
		reused := txns(func(int) string { return "warm" })
		fresh := txns(func(i int) string { return fmt.Sprintf("fresh%d", i) })
		if fresh != reused+1 {
			t.Errorf("acquire+release: %d transactions on a fresh name, %d on a name in use; want exactly one more (the parent)", fresh, reused)
		}
	})
}

// TestRequestsPerUse counts the requests an uncontended acquire+release
// of a name in use sends (the floor's 2: the grant's multi and the
// release), and a TryAcquire of a held lock with the basic recipe (1: the
// failed multi; the read with a watch is a waiter's, after its create
// failed). Each count is the least of 5 tries: a lease held past
// lazyWatch sets its watch, one request more.
func TestRequestsPerUse(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		dl := open(t, srv.URL, prefix, "recipe="+recipe)
		d := driverOf(dl)
		ctx := testenv.Context(t, 30*time.Second)
		least := func(f func()) int64 {
			best := int64(math.MaxInt64)
			for range 5 {
				before := d.s.tr.sent.Load()
				f()
				best = min(best, d.s.tr.sent.Load()-before)
			}
			return best
		}
		cycle := func() {
			if err := use(ctx, dl, "u"); err != nil {
				t.Fatal(err)
			}
		}
		cycle() // the parent exists
		if n := least(cycle); n != 2 {
			t.Errorf("acquire+release sent %d requests, want 2", n)
		}
		if recipe != RecipeBasic {
			return
		}
		other := open(t, srv.URL, prefix, "recipe="+recipe)
		h, err := other.Acquire(ctx, "u", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		if n := least(func() {
			if _, err := dl.TryAcquire(ctx, "u", nil); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryAcquire of a held lock: %v", err)
			}
		}); n != 1 {
			t.Errorf("TryAcquire of a held lock sent %d requests, want 1", n)
		}
	})
}

// goroutinesCreated is the count of goroutines this process has created.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestGoroutinesPerUse: an uncontended acquire+release, released before
// lazyWatch, starts two goroutines, the create's and the release's delete
// (each lets its caller return when its context ends while the request is
// in flight: go-zookeeper's calls take no context), and none for the
// lease's lazy watch (a timer's function) or for the portable layer to
// wait on its loss (OnLost). It was 4.
func TestGoroutinesPerUse(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		l := open(t, srv.URL, prefix, "recipe="+recipe)
		ctx := context.Background()
		use := func() {
			ls, err := l.Acquire(ctx, "u", &dlock.AcquireOptions{NoKeepAlive: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		use() // the parent exists
		const n = 50
		best := math.Inf(1)
		for range 3 {
			before := goroutinesCreated()
			for range n {
				use()
			}
			best = min(best, float64(goroutinesCreated()-before)/n)
		}
		if best > 2.2 {
			t.Errorf("%.2f goroutines created per acquire+release, want 2", best)
		}
	})
}
