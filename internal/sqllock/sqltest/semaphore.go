package sqltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/sqllock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// Semaphores runs the semaphore checks on each strategy of the server
// at rawURL; admin reaches its sessions (Kill).
func Semaphores(t *testing.T, rawURL, native string) {
	EachStrategy(t, rawURL, native, func(t *testing.T, rawURL string) {
		for _, c := range []struct {
			name string
			f    func(t *testing.T, rawURL string)
		}{
			{"Capabilities", semCapabilities},
			{"AtMostN", SemAtMostN},
			{"Mismatch", SemMismatch},
			{"CrashFreesPermit", SemCrashFreesPermit},
			{"CancelLeavesNothing", SemCancelLeavesNothing},
			{"Namespace", SemNamespace},
			{"MaxPermits", SemMaxPermits},
			{"RefreshRelease", SemRefreshRelease},
		} {
			t.Run(c.name, func(t *testing.T) { c.f(t, rawURL) })
		}
	})
}

// semStart returns what most semaphore checks start from: a context for
// the check (30s), two Lockers on rawURL and a fresh semaphore name.
func semStart(t *testing.T, rawURL string) (ctx context.Context, a, b *dlock.Locker, name string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, Open(t, ctx, rawURL), Open(t, ctx, rawURL), semName(t)
}

// semName is a fresh semaphore name for a test.
func semName(t *testing.T) string {
	return fmt.Sprintf("sem/%s/%d", t.Name(), time.Now().UnixNano())
}

func semaphore(t *testing.T, l *dlock.Locker, name string, n int) *dlock.Semaphore {
	t.Helper()
	s, err := l.Semaphore(name, n)
	if err != nil {
		t.Fatalf("semaphore %q of %d: %v", name, n, err)
	}
	return s
}

// semCapabilities: the strategy declares semaphores, waited for by
// notification where the database has it (PostgreSQL) and polling
// otherwise, unfair.
func semCapabilities(t *testing.T, rawURL string) {
	l := Open(t, t.Context(), rawURL)
	c := l.Capabilities()
	if c.MaxPermits < 1000 {
		t.Errorf("MaxPermits %d, want at least 1000", c.MaxPermits)
	}
	want := driver.WaitPoll
	if _, ok := Core(l).Pool().(sqllock.Notifier); ok {
		want = driver.WaitNotify
	}
	if c.SemaphoreWait != want || c.SemaphoreFair {
		t.Errorf("SemaphoreWait %q, SemaphoreFair %v; want %q, false", c.SemaphoreWait, c.SemaphoreFair, want)
	}
}

// SemAtMostN: clients of several Lockers contending for a semaphore of 3
// permits never hold more than 3 at once, all get permits, and each
// grant's token is larger than the token of every grant returned before
// its Acquire started.
func SemAtMostN(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const n, lockers, perLocker, rounds = 3, 3, 3, 6
	name := semName(t)
	var (
		inside, most atomic.Int32
		mu           sync.Mutex
		returned     uint64 // the largest token of a grant returned so far
		wg           sync.WaitGroup
		errs         = make(chan error, lockers*perLocker)
	)
	for range lockers {
		l := Open(t, ctx, rawURL)
		s := semaphore(t, l, name, n)
		for range perLocker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					mu.Lock()
					before := returned
					mu.Unlock()
					p, err := s.Acquire(ctx, &dlock.AcquireOptions{TTL: 10 * time.Second})
					if err != nil {
						errs <- err
						return
					}
					in := inside.Add(1)
					for m := most.Load(); in > m && !most.CompareAndSwap(m, in); m = most.Load() {
					}
					mu.Lock()
					if p.Token() <= before {
						errs <- fmt.Errorf("token %d granted after a grant of token %d had returned", p.Token(), before)
					}
					returned = max(returned, p.Token())
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
					inside.Add(-1)
					if err := p.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := most.Load(); m > n {
		t.Fatalf("%d holders at once of a semaphore of %d permits", m, n)
	} else if m < 2 {
		t.Logf("at most %d holders at once: little contention", m)
	}
}

// SemMismatch: while a permit is held, an attempt naming another number
// of permits fails with ErrInvalidOption and changes nothing; once all are
// free, the new number applies, and slots beyond it are not used.
func SemMismatch(t *testing.T, rawURL string) {
	ctx, a, b, name := semStart(t, rawURL)
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	p, err := semaphore(t, a, name, 3).TryAcquire(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := semaphore(t, b, name, 2).TryAcquire(ctx, opts); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("try-acquire of 2 permits while one of 3 is held: %v, want ErrInvalidOption", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = semaphore(t, b, name, 4).Acquire(wctx, opts)
	wcancel()
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("acquire of 4 permits while one of 3 is held: %v, want ErrInvalidOption", err)
	}
	// Nothing changed: 3 permits still, 2 more to take.
	var held []*dlock.Lease
	for i := range 2 {
		q, err := semaphore(t, b, name, 3).TryAcquire(ctx, opts)
		if err != nil {
			t.Fatalf("permit %d of 3 after the refused attempts: %v", i+2, err)
		}
		held = append(held, q)
	}
	if _, err := semaphore(t, b, name, 3).TryAcquire(ctx, opts); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a 4th permit of 3: %v, want ErrNotAcquired", err)
	}
	for _, q := range append(held, p) {
		if err := q.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// All free: 2 applies, and its third attempt is refused.
	two := semaphore(t, b, name, 2)
	for i := range 2 {
		q, err := two.TryAcquire(ctx, opts)
		if err != nil {
			t.Fatalf("permit %d of 2 once the 3 were free: %v", i+1, err)
		}
		defer q.Release(ctx)
	}
	if _, err := two.TryAcquire(ctx, opts); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a 3rd permit of 2 (shrunk from 3): %v, want ErrNotAcquired", err)
	}
	if _, err := semaphore(t, a, name, 3).TryAcquire(ctx, opts); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("try-acquire of 3 permits while 2 of 2 are held: %v, want ErrInvalidOption", err)
	}
}

// SemCrashFreesPermit: a holder whose connection the server drops (pinned
// strategies) or whose lease runs out without a keep-alive (version) gives
// its permit back to a waiter.
func SemCrashFreesPermit(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a, b, admin := Open(t, ctx, rawURL), Open(t, ctx, rawURL), Open(t, ctx, rawURL)
	name := semName(t)
	version := a.Capabilities().Strategy == "version"
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	if version {
		opts = &dlock.AcquireOptions{TTL: time.Second, NoKeepAlive: true}
	}
	var held []*dlock.Lease
	for range 2 {
		p, err := semaphore(t, a, name, 2).TryAcquire(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	if _, err := semaphore(t, b, name, 2).TryAcquire(ctx, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a 3rd permit of 2: %v, want ErrNotAcquired", err)
	}
	if !version {
		sessions := Core(a).Sessions()
		if len(sessions) != 2 {
			t.Fatalf("%d pinned sessions, want 2", len(sessions))
		}
		if err := Kill(ctx, admin, sessions[0]); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	p, err := semaphore(t, b, name, 2).Acquire(wctx, &dlock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire after a holder's crash: %v", err)
	}
	t.Logf("granted %v after the crash", time.Since(start).Round(time.Millisecond))
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range held {
		h.Release(ctx)
	}
}

// SemCancelLeavesNothing: Acquires cancelled while every permit is held
// leave nothing behind: once the holder releases, every permit can be
// taken at once.
func SemCancelLeavesNothing(t *testing.T, rawURL string) {
	ctx, a, b, name := semStart(t, rawURL)
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	p, err := semaphore(t, a, name, 1).TryAcquire(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := semaphore(t, b, name, 1)
	for i := range 5 {
		wctx, wcancel := context.WithTimeout(ctx, time.Duration(20+40*i)*time.Millisecond)
		_, err := s.Acquire(wctx, opts)
		wcancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acquire of a held semaphore until a deadline: %v, want DeadlineExceeded", err)
		}
	}
	cctx, ccancel := context.WithCancel(ctx)
	go func() { time.Sleep(50 * time.Millisecond); ccancel() }()
	if _, err := s.Acquire(cctx, opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v, want Canceled", err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := semaphore(t, a, name, 1).TryAcquire(ctx, opts)
	if err != nil {
		t.Fatalf("try-acquire after the cancelled attempts and the release: %v", err)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// SemNamespace: the semaphore "x" and the lock "x" are unrelated.
func SemNamespace(t *testing.T, rawURL string) {
	ctx, a, b, name := semStart(t, rawURL)
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	ls, err := a.TryAcquire(ctx, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := semaphore(t, b, name, 1).TryAcquire(ctx, opts)
	if err != nil {
		t.Fatalf("semaphore of a held lock's name: %v", err)
	}
	if _, err := a.TryAcquire(ctx, name, opts); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("lock held, its semaphore too: %v, want ErrNotAcquired", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := semaphore(t, a, name, 1).TryAcquire(ctx, opts); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("the semaphore's permit, with its lock released: %v, want ErrNotAcquired", err)
	}
	ls, err = b.TryAcquire(ctx, name, opts)
	if err != nil {
		t.Fatalf("the lock, with a permit of its semaphore held: %v", err)
	}
	ls.Release(ctx)
	p.Release(ctx)
}

// SemMaxPermits: a semaphore of MaxPermits permits works; one more is
// refused before any server call.
func SemMaxPermits(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l := Open(t, ctx, rawURL)
	max := l.Capabilities().MaxPermits
	if _, err := l.Semaphore("x", max+1); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("a semaphore of %d permits: %v, want ErrInvalidOption", max+1, err)
	}
	s := semaphore(t, l, semName(t), max)
	var held []*dlock.Lease
	defer func() {
		for _, p := range held {
			p.Release(ctx)
		}
	}()
	for range 3 {
		p, err := s.TryAcquire(ctx, &dlock.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("a permit of %d: %v", max, err)
		}
		held = append(held, p)
	}
}

// SemTokensAfterRestart: a permit granted after a kill -9 of the server
// has a larger token than one granted before it, on every strategy (as
// the strategies' lock tokens do, TokenAfterCrash).
func SemTokensAfterRestart(t *testing.T, srv *testenv.Server, native string) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	opts := &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true}
	var ls []*dlock.Locker
	var sems []*dlock.Semaphore
	for _, s := range Strategies(native) {
		l := Open(t, ctx, WithParams(srv.URL, "strategy", s))
		ls = append(ls, l)
		// 4 permits: a version permit whose release meets a connection
		// broken by the restart stays held until its TTL, one a round.
		sems = append(sems, semaphore(t, l, "crash", 4))
	}
	for round := range 2 {
		var before []*dlock.Lease
		for _, s := range sems {
			p, err := s.TryAcquire(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			before = append(before, p)
		}
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		for i, s := range sems {
			_ = before[i].Release(ctx) // the pinned ones died with the server
			var p *dlock.Lease
			var err error
			for try := 0; p == nil; try++ {
				if p, err = s.TryAcquire(ctx, opts); err != nil && try == 10 {
					t.Fatalf("round %d, %s: after the restart: %v", round, ls[i].Capabilities().Strategy, err)
				}
			}
			if p.Token() <= before[i].Token() {
				t.Fatalf("round %d, %s: token %d after a kill -9 of the server, %d before it: the token went back",
					round, ls[i].Capabilities().Strategy, p.Token(), before[i].Token())
			}
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// SemRefreshRelease: a permit can be refreshed (its keep-alive finds it
// held) and released once; a second release is ErrNotHeld.
func SemRefreshRelease(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l := Open(t, ctx, rawURL)
	s := semaphore(t, l, semName(t), 2)
	for range 2 {
		p, err := s.TryAcquire(ctx, &dlock.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Refresh(ctx); err != nil {
			t.Fatalf("refresh of a held permit: %v", err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatalf("release of a held permit: %v", err)
		}
		if err := p.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("second release: %v, want ErrNotHeld", err)
		}
	}
}

// SemRoundTrips: an uncontended TryAcquire and Release of a permit on l
// (whose round trips f counts) cost one round trip each once the
// semaphore exists and the connection is warm, as a lock's do.
func SemRoundTrips(t *testing.T, l *dlock.Locker, f *Flights) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := semaphore(t, l, "rt", 3)
	opts := &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true}
	cycle := func() {
		t.Helper()
		p, err := s.TryAcquire(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		cycle() // create the semaphore, learn the sessions, prepare
	}
	const n = 200
	r0, _ := f.Count()
	start := time.Now()
	for range n {
		cycle()
	}
	took := time.Since(start)
	r1, _ := f.Count()
	rt := float64(r1-r0) / n
	t.Logf("%s: per permit TryAcquire+Release: %.2f round trips, %v", l.Capabilities().Strategy, rt, took/n)
	if rt > 2 {
		t.Errorf("%.2f round trips per permit TryAcquire+Release, want 2", rt)
	}
}
