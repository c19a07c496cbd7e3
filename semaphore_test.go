package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/memory"
)

// permitsDriver is the memory driver behind a client that counts its
// server calls and may declare other capabilities (it is no Blocker, so
// waits poll).
type permitsDriver struct {
	driver.Locker
	maxPermits int
	calls      atomic.Int32
}

func newPermitsDriver(ns *memory.Namespace, maxPermits int) (*permitsDriver, *dlock.Locker) {
	d := &permitsDriver{Locker: memory.OpenLocker(ns).Driver(), maxPermits: maxPermits}
	return d, dlock.NewLocker(d)
}

func (d *permitsDriver) Capabilities() driver.Capabilities {
	c := d.Locker.Capabilities()
	c.MaxPermits = d.maxPermits
	if d.maxPermits == 0 {
		c.SemaphoreWait, c.SemaphoreFair = "", false
	}
	return c
}

func (d *permitsDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	d.calls.Add(1)
	return d.Locker.TryAcquire(ctx, req)
}

// once fails unless each of parts occurs exactly once in err's text.
func once(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("no error, want one saying %q once each", parts)
		return
	}
	for _, p := range parts {
		if n := strings.Count(err.Error(), p); n != 1 {
			t.Errorf("%q says %q %d times, want once", err, p, n)
		}
	}
}

// Locker.Semaphore checks its arguments without a server call:
// ErrUnsupported without semaphores, ErrInvalidOption for a number of
// permits out of range or an Owner, ErrInvalidName for a bad name.
func TestSemaphoreArguments(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ns := memory.NewNamespace()

	none, l0 := newPermitsDriver(ns, 0)
	defer l0.Close()
	_, err := l0.Semaphore("x", 1)
	if !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Semaphore on a backend with MaxPermits 0 = %v, want ErrUnsupported", err)
	}
	once(t, err, "dlock:", `"x"`, "memory", dlock.ErrUnsupported.Error())

	d, l := newPermitsDriver(ns, 5)
	defer l.Close()
	for _, p := range []int{0, -1, 6, int(^uint(0) >> 1)} {
		_, err := l.Semaphore("x", p)
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Semaphore(x, %d) = %v, want ErrInvalidOption", p, err)
		}
		once(t, err, "dlock:", `"x"`, fmt.Sprint(p), dlock.ErrInvalidOption.Error())
	}
	for _, name := range []string{"", "\xff", strings.Repeat("n", dlock.MaxNameLen+1)} {
		if _, err := l.Semaphore(name, 2); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("Semaphore(%q, 2) = %v, want ErrInvalidName", name, err)
		}
	}
	s, err := l.Semaphore("x", 5)
	if err != nil {
		t.Fatalf("Semaphore(x, 5) with MaxPermits 5: %v", err)
	}
	if s.Name() != "x" || s.Permits() != 5 {
		t.Errorf("Name, Permits = %q, %d; want x, 5", s.Name(), s.Permits())
	}
	owner := &dlock.AcquireOptions{Owner: "me"}
	_, err = s.TryAcquire(ctx, owner)
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("TryAcquire with an Owner = %v, want ErrInvalidOption", err)
	}
	once(t, err, "dlock:", `"x"`, dlock.ErrInvalidOption.Error())
	if _, err := s.Acquire(ctx, owner); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Acquire with an Owner = %v, want ErrInvalidOption", err)
	}
	if _, err := s.Acquire(ctx, &dlock.AcquireOptions{TTL: -time.Second}); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Acquire with a negative TTL = %v, want ErrInvalidOption", err)
	}
	if n := d.calls.Load() + none.calls.Load(); n != 0 {
		t.Errorf("%d server calls for arguments refused, want 0", n)
	}
	if ns.Holders("x") != 0 {
		t.Errorf("%d permits of x held after refused calls", ns.Holders("x"))
	}
}

// A semaphore's errors say each thing once: one "dlock:", the operation
// and the name, the driver's name, the sentinel's text.
func TestSemaphoreErrorText(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ns := memory.NewNamespace()
	a, b := memory.OpenLocker(ns), memory.OpenLocker(ns)
	defer a.Close()
	defer b.Close()
	s3, _ := a.Semaphore("x", 3)
	p, err := s3.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)

	s2, _ := b.Semaphore("x", 2)
	_, err = s2.Acquire(ctx, nil)
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("Acquire naming 2 permits of x held with 3 = %v, want ErrInvalidOption", err)
	}
	if !strings.HasPrefix(err.Error(), `dlock: acquire semaphore "x": memory: `) {
		t.Errorf("%q does not start with %q", err, `dlock: acquire semaphore "x": memory: `)
	}
	once(t, err, "dlock:", "semaphore", `"x"`, "memory", "3", "2", dlock.ErrInvalidOption.Error())
	_, err = s2.TryAcquire(ctx, nil)
	once(t, err, "dlock:", "try-acquire semaphore", `"x"`, "memory", dlock.ErrInvalidOption.Error())

	one, _ := a.Semaphore("y", 1)
	q, err := one.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Release(ctx)
	one, _ = b.Semaphore("y", 1)
	_, err = one.TryAcquire(ctx, nil)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a full semaphore = %v, want ErrNotAcquired", err)
	}
	once(t, err, "dlock:", "semaphore", `"y"`, dlock.ErrNotAcquired.Error())
}

// Semaphore.Do holds a permit while fn runs and always gives it back;
// fn's context ends when the permit is lost, and Do then says so.
func TestSemaphoreDo(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ns := memory.NewNamespace()
	l := memory.OpenLocker(ns)
	defer l.Close()
	s, _ := l.Semaphore("jobs", 2)

	err := s.Do(ctx, nil, func(ctx context.Context, permit *dlock.Lease) error {
		if permit.Token() == 0 || permit.Name() != "jobs" {
			t.Errorf("permit %q with token %d", permit.Name(), permit.Token())
		}
		if n := ns.Holders("jobs"); n != 1 {
			t.Errorf("%d permits held inside Do, want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Errorf("Do: %v", err)
	}
	if n := ns.Holders("jobs"); n != 0 {
		t.Errorf("%d permits held after Do, want 0", n)
	}

	boom := errors.New("boom")
	if err := s.Do(ctx, nil, func(context.Context, *dlock.Lease) error { return boom }); err != boom {
		t.Errorf("Do = %v, want fn's error itself", err)
	}
	if n := ns.Holders("jobs"); n != 0 {
		t.Errorf("%d permits held after Do whose fn failed, want 0", n)
	}

	err = s.Do(ctx, nil, func(ctx context.Context, _ *dlock.Lease) error {
		if !ns.RevokePermit("jobs") {
			t.Error("RevokePermit found no permit")
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Error("fn's context did not end when its permit was lost")
		}
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Do whose permit was lost = %v, want ErrLockLost", err)
	}

	// All permits taken: Do waits, and gives up with ctx without running fn.
	x, _ := s.TryAcquire(ctx, nil)
	y, _ := s.TryAcquire(ctx, nil)
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	err = s.Do(short, nil, func(context.Context, *dlock.Lease) error {
		t.Error("fn ran while every permit was held")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do on a full semaphore past its deadline = %v, want context.DeadlineExceeded", err)
	}
	x.Release(ctx)
	y.Release(ctx)
}

// Close ends a Locker's permits (ErrClosed) and frees them on the server,
// and ends its semaphore waits with ErrClosed.
func TestSemaphoreClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ns := memory.NewNamespace()
	l, other := memory.OpenLocker(ns), memory.OpenLocker(ns)
	defer other.Close()
	s, _ := l.Semaphore("s", 3)
	so, _ := other.Semaphore("s", 3)
	theirs, err := so.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Release(ctx)
	var mine []*dlock.Lease
	for range 2 {
		p, err := s.TryAcquire(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, p)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, nil)
		waiting <- err
	}()
	// Give the wait time to queue (if Close came first, the Acquire
	// would return ErrClosed all the same).
	time.Sleep(50 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i, p := range mine {
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("permit %d: Done did not close on Close", i)
		}
		if !errors.Is(p.Err(), dlock.ErrClosed) {
			t.Errorf("permit %d: Err after Close = %v, want ErrClosed", i, p.Err())
		}
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("a semaphore wait when its Locker closed = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a semaphore wait did not end on Close")
	}
	if n := ns.Holders("s"); n != 1 {
		t.Errorf("%d permits held after Close, want 1 (the other client's)", n)
	}
	if _, err := s.TryAcquire(ctx, nil); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryAcquire after Close = %v, want ErrClosed", err)
	}
}

// Under many goroutines on several clients (run with -race), a semaphore
// of N never has more than N holders, every acquisition is granted, and
// no token is given twice.
func TestSemaphoreManyGoroutines(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const n, clients, goroutines, rounds = 3, 4, 16, 25
	ns := memory.NewNamespace()
	var inside, most atomic.Int32
	var mu sync.Mutex
	tokens := map[uint64]bool{}
	var wg sync.WaitGroup
	for range clients {
		l := memory.OpenLocker(ns)
		defer l.Close()
		s, err := l.Semaphore("many", n)
		if err != nil {
			t.Fatal(err)
		}
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					p, err := s.Acquire(ctx, &dlock.AcquireOptions{TTL: 30 * time.Second})
					if err != nil {
						t.Error(err)
						return
					}
					k := inside.Add(1)
					for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
					}
					if h := ns.Holders("many"); h > n {
						t.Errorf("%d holders of a semaphore of %d", h, n)
					}
					mu.Lock()
					if tokens[p.Token()] {
						t.Errorf("token %d given twice", p.Token())
					}
					tokens[p.Token()] = true
					mu.Unlock()
					inside.Add(-1)
					if err := p.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	if m := most.Load(); m > n {
		t.Errorf("%d holders at once, want at most %d", m, n)
	}
	if got, want := len(tokens), clients*goroutines*rounds; got != want {
		t.Errorf("%d grants, want %d", got, want)
	}
}
