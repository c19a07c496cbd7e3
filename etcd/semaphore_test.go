package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/testenv"
)

// semEnv is a shared etcd server, a fresh prefix and k Lockers on it.
type semEnv struct {
	addr, prefix string
	lockers      []*dlock.Locker
	ctx          context.Context
}

func newSemEnv(t *testing.T, k int, d time.Duration) *semEnv {
	s := testenv.Etcd(t)
	e := &semEnv{addr: s.Addr, prefix: fmt.Sprintf("/dlocktest/%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano()), ctx: testenv.Context(t, d)}
	for range k {
		l, err := dlock.Open(e.ctx, s.URL+e.prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		e.lockers = append(e.lockers, l)
	}
	return e
}

func (e *semEnv) semaphore(t testing.TB, i int, name string, n int) *dlock.Semaphore {
	t.Helper()
	s, err := e.lockers[i].Semaphore(name, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// keys returns the keys of the semaphore name's queue, oldest first.
func (e *semEnv) keys(t testing.TB, name string) []queueKV {
	t.Helper()
	return rangeKeys(t, e.ctx, e.addr, layout.EtcdSemaphoreQueue(e.prefix, name))
}

// waitKeys waits until the semaphore name's queue has k keys.
func (e *semEnv) waitKeys(t *testing.T, name string, k int) []queueKV {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		kvs := e.keys(t, name)
		if len(kvs) == k {
			return kvs
		}
		if time.Now().After(deadline) {
			t.Fatalf("semaphore %q: %d keys, want %d", name, len(kvs), k)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// noKeys checks that nothing is left under the prefix.
func (e *semEnv) noKeys(t *testing.T) {
	t.Helper()
	q := e.prefix + "/"
	deadline := time.Now().Add(5 * time.Second)
	for {
		kvs := rangeKeys(t, e.ctx, e.addr, q)
		if len(kvs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("keys left under %s: %d", q, len(kvs))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSemaphoreAtMostN: three Lockers, three goroutines each, on a
// semaphore of 2 permits. Never more than 2 holders at once, and 2 at once
// is reached; each goroutine's successive tokens increase; no token is
// granted twice.
func TestSemaphoreAtMostN(t *testing.T) {
	e := newSemEnv(t, 3, time.Minute)
	const n = 2
	var sems []*dlock.Semaphore
	for i := range 3 {
		sems = append(sems, e.semaphore(t, i, "pool", n))
	}
	most, _ := backendtest.SemaphoreAtMostN(e.ctx, t, backendtest.Contention{
		Sems: sems, N: n, Goroutines: 3, Rounds: 10, Hold: 2 * time.Millisecond,
	})
	if most != n {
		t.Errorf("at most %d holders at once, want %d", most, n)
	}
	e.noKeys(t)
}

// TestSemaphoreWakeup: N = 2, the queue [a, b, w]; releasing b (not the
// oldest) grants w, with a greater token; then waiters are granted in
// arrival order.
func TestSemaphoreWakeup(t *testing.T) {
	e := newSemEnv(t, 3, 30*time.Second)
	a, err := e.semaphore(t, 0, "s", 2).Acquire(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.semaphore(t, 1, "s", 2).Acquire(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 2)
	acquire := func(i int) {
		p, err := e.semaphore(t, i, "s", 2).Acquire(e.ctx, nil)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}
	go acquire(2)
	e.waitKeys(t, "s", 3)
	go acquire(0) // a second waiter, behind the first
	e.waitKeys(t, "s", 4)
	select {
	case <-got:
		t.Fatal("granted a third permit of 2")
	case <-time.After(200 * time.Millisecond):
	}
	if err := b.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if w.Token() <= b.Token() {
		t.Errorf("token %d after %d", w.Token(), b.Token())
	}
	select {
	case <-got:
		t.Fatal("two waiters granted by one release")
	case <-time.After(200 * time.Millisecond):
	}
	if err := a.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	x := <-got
	if x == nil {
		t.FailNow()
	}
	if x.Token() <= w.Token() {
		t.Errorf("the second waiter's token %d, the first's %d: not in arrival order", x.Token(), w.Token())
	}
	_ = w.Release(e.ctx)
	_ = x.Release(e.ctx)
	e.noKeys(t)
}

// TestSemaphoreMismatch: while a permit is held or waited for, an attempt
// with another number of permits is refused and changes nothing; once all
// are free, the next attempt's number applies.
func TestSemaphoreMismatch(t *testing.T) {
	e := newSemEnv(t, 3, 30*time.Second)
	two, three := e.semaphore(t, 0, "m", 2), e.semaphore(t, 1, "m", 3)
	refused := func(why string) {
		t.Helper()
		before := e.keys(t, "m")
		if _, err := three.TryAcquire(e.ctx, nil); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("%s: TryAcquire with 3 permits: %v, want ErrInvalidOption", why, err)
		}
		actx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		_, err := three.Acquire(actx, nil)
		cancel()
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "2 permits") {
			t.Errorf("%s: Acquire with 3 permits: %v, want ErrInvalidOption saying 2 permits", why, err)
		}
		if after := e.keys(t, "m"); len(after) != len(before) {
			t.Errorf("%s: %d keys, then %d", why, len(before), len(after))
		}
	}
	p1, err := two.Acquire(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	refused("one permit held")
	p2, err := e.semaphore(t, 2, "m", 2).Acquire(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(e.ctx)
	defer stop()
	waiter := make(chan error, 1)
	go func() { _, err := two.Acquire(wctx, nil); waiter <- err }()
	e.waitKeys(t, "m", 3)
	refused("both held, one waiter")
	if err := p1.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	stop()
	if err := p2.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	// The granted waiter's permit: revoke its lease.
	kvs := e.waitKeys(t, "m", 1)
	if err := testenv.EtcdCall(e.ctx, e.addr, "/v3/lease/revoke", map[string]string{"ID": kvs[0].Lease}, nil); err != nil {
		t.Fatal(err)
	}
	e.waitKeys(t, "m", 0)
	var ps []*dlock.Lease
	for range 3 {
		p, err := three.TryAcquire(e.ctx, nil)
		if err != nil {
			t.Fatalf("all free, 3 permits: %v", err)
		}
		ps = append(ps, p)
	}
	if _, err := two.TryAcquire(e.ctx, nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("2 permits while 3 are held: %v", err)
	}
	for _, p := range ps {
		_ = p.Release(e.ctx)
	}
	e.noKeys(t)
}

// TestSemaphoreCancelLeavesNothing: a TryAcquire that finds every permit
// taken and a cancelled Acquire leave no key.
func TestSemaphoreCancelLeavesNothing(t *testing.T) {
	e := newSemEnv(t, 2, 30*time.Second)
	var held []*dlock.Lease
	for range 2 {
		p, err := e.semaphore(t, 0, "c", 2).TryAcquire(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	sem := e.semaphore(t, 1, "c", 2)
	if _, err := sem.TryAcquire(e.ctx, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire of a full semaphore: %v", err)
	}
	if k := e.keys(t, "c"); len(k) != 2 {
		t.Errorf("after TryAcquire: %d keys, want the 2 holders'", len(k))
	}
	for _, d := range []time.Duration{0, time.Millisecond, 50 * time.Millisecond, 300 * time.Millisecond} {
		cctx, cancel := context.WithTimeout(e.ctx, d)
		_, err := sem.Acquire(cctx, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled acquire: %v", err)
		}
		if k := e.keys(t, "c"); len(k) != 2 {
			t.Errorf("after a cancelled Acquire (%v): %d keys, want the 2 holders'", d, len(k))
		}
	}
	for _, p := range held {
		if err := p.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.noKeys(t)
}

// TestSemaphoreRevokedPermit: a permit whose etcd lease is revoked (as
// when its holder stops renewing it) is reported lost, and the waiter is
// granted its permit with a greater token.
func TestSemaphoreRevokedPermit(t *testing.T) {
	e := newSemEnv(t, 2, 30*time.Second)
	p, err := e.semaphore(t, 0, "r", 1).Acquire(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		q, err := e.semaphore(t, 1, "r", 1).Acquire(e.ctx, nil)
		if err != nil {
			t.Error(err)
		}
		got <- q
	}()
	kvs := e.waitKeys(t, "r", 2)
	if err := testenv.EtcdCall(e.ctx, e.addr, "/v3/lease/revoke", map[string]string{"ID": kvs[0].Lease}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		if !errors.Is(p.Err(), dlock.ErrLockLost) {
			t.Errorf("revoked permit: Err %v", p.Err())
		}
	case <-e.ctx.Done():
		t.Fatal("the revoked permit was not reported lost")
	}
	q := <-got
	if q == nil {
		t.FailNow()
	}
	if q.Token() <= p.Token() {
		t.Errorf("token %d after %d", q.Token(), p.Token())
	}
	_ = q.Release(e.ctx)
	e.noKeys(t)
}

// TestSemaphoreApartFromLock: the semaphore "x" and the lock "x" are held
// at once.
func TestSemaphoreApartFromLock(t *testing.T) {
	e := newSemEnv(t, 2, 30*time.Second)
	lock, err := e.lockers[0].Acquire(e.ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.semaphore(t, 1, "x", 1).TryAcquire(e.ctx, nil)
	if err != nil {
		t.Fatalf("semaphore x while the lock x is held: %v", err)
	}
	if _, err := e.lockers[1].TryAcquire(e.ctx, "x", nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("the lock x while held: %v", err)
	}
	_ = p.Release(e.ctx)
	_ = lock.Release(e.ctx)
	e.noKeys(t)
}

// TestSemaphoreMaxPermits: a semaphore of MaxPermits holds that many
// permits at once, and no more; one more permit is refused before any
// server call.
func TestSemaphoreMaxPermits(t *testing.T) {
	e := newSemEnv(t, 1, 2*time.Minute)
	l := e.lockers[0]
	if got := l.Capabilities().MaxPermits; got != MaxPermits {
		t.Fatalf("Capabilities.MaxPermits %d, want %d", got, MaxPermits)
	}
	if _, err := l.Semaphore("max", MaxPermits+1); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("%d permits: %v", MaxPermits+1, err)
	}
	sem := e.semaphore(t, 0, "max", MaxPermits)
	var held []*dlock.Lease
	for i := range MaxPermits {
		p, err := sem.TryAcquire(e.ctx, &dlock.AcquireOptions{NoKeepAlive: true})
		if err != nil {
			t.Fatalf("permit %d of %d: %v", i+1, MaxPermits, err)
		}
		held = append(held, p)
	}
	if _, err := sem.TryAcquire(e.ctx, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("permit %d of %d: %v", MaxPermits+1, MaxPermits, err)
	}
	toks := make([]uint64, 0, len(held))
	for _, p := range held {
		toks = append(toks, p.Token())
		if err := p.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.IsSorted(toks) {
		t.Errorf("tokens of successive grants not increasing: %v", toks)
	}
	e.noKeys(t)
}

func TestPermitsOf(t *testing.T) {
	for v, want := range map[string]int{"4\nowner": 4, "256\n": 256, "owner": 0, "0\nx": 0, "-1\nx": 0, "x\ny": 0, "": 0} {
		if got := permitsOf([]byte(v)); got != want {
			t.Errorf("permitsOf(%q) = %d, want %d", v, got, want)
		}
	}
}

// TestSemaphoreWaiterLeaseLost: a waiter whose etcd lease is revoked while
// it waits is never granted on its dead key (Jepsen's etcd 3.4.3 finding,
// as TestLeaseLostWhileWaiting for a lock): it queues again and is
// granted on a new key, with a token above the dead key's revision.
func TestSemaphoreWaiterLeaseLost(t *testing.T) { semWaiterLeaseLost(t, false) }

// TestSemaphoreWaiterLeaseLostBeforeWatch: the same, with the lease
// revoked after the waiter queued its key but before its watch started
// (so that no event of the watch tells it): it queues again as soon as
// its watch is up, not at its next renewal, a third of the TTL later.
func TestSemaphoreWaiterLeaseLostBeforeWatch(t *testing.T) { semWaiterLeaseLost(t, true) }

// semWaiterLeaseLost has a waiter queue behind the holder of a one-permit
// semaphore and revokes the waiter's etcd lease (beforeWatch: in
// testBeforeWatch, before its watch starts; otherwise once its key is
// seen queued). The waiter must queue again with a new key well before
// its next renewal (a third of the 30s TTL) would tell it, and be
// granted at the holder's release with a token above the dead key's
// revision.
func semWaiterLeaseLost(t *testing.T, beforeWatch bool) {
	e := newSemEnv(t, 2, 30*time.Second)
	p, err := e.semaphore(t, 0, "w", 1).Acquire(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	revoked := make(chan queueKV, 1)
	revoke := func() {
		kvs := e.keys(t, "w")
		if len(kvs) != 2 {
			t.Errorf("keys before the revocation: %+v", kvs)
			close(revoked)
			return
		}
		if err := testenv.EtcdCall(e.ctx, e.addr, "/v3/lease/revoke", map[string]string{"ID": kvs[1].Lease}, nil); err != nil {
			t.Error(err)
		}
		revoked <- kvs[1]
	}
	within := 5 * time.Second
	if beforeWatch {
		within = 3 * time.Second
		var once sync.Once
		testBeforeWatch = func() { once.Do(revoke) }
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		q, err := e.semaphore(t, 1, "w", 1).Acquire(e.ctx, nil)
		if err != nil {
			t.Error(err)
		}
		got <- q
	}()
	if !beforeWatch {
		e.waitKeys(t, "w", 2)
		revoke()
	}
	dead, ok := <-revoked
	if !ok {
		t.FailNow()
	}
	deadline := time.Now().Add(within)
	for {
		kvs := e.keys(t, "w")
		if len(kvs) == 2 && kvs[1].Lease != dead.Lease {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter did not queue again within %v of its lease's revocation (its renewal is due in 10s): %+v", within, kvs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	q := <-got
	testBeforeWatch = nil // the waiter's goroutine is done with it
	if q == nil {
		t.FailNow()
	}
	if d, _ := strconv.ParseUint(dead.CreateRevision, 10, 64); q.Token() <= d {
		t.Errorf("granted with token %d, the dead key's revision is %d", q.Token(), d)
	}
	_ = q.Release(e.ctx)
	e.noKeys(t)
}
