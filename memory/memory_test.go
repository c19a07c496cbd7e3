package memory_test

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
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/memory"
)

// harness runs the conformance suite on one memory namespace. mem:// is
// private to a process, so it has no URL and the cross-process cases are
// skipped.
type harness struct{ ns *memory.Namespace }

var (
	_ conformance.Revoker = harness{}
	_ conformance.Residue = harness{}
)

func (h harness) NewLocker(context.Context) (*dlock.Locker, error) {
	return memory.OpenLocker(h.ns), nil
}
func (harness) URL() string  { return "" }
func (harness) Close() error { return nil }

func (h harness) Revoke(_ context.Context, name string) error {
	if !h.ns.Revoke(name) {
		return fmt.Errorf("memory harness: revoke %q: %w", name, dlock.ErrNotHeld)
	}
	return nil
}

func (h harness) Residue(_ context.Context, name string) (int, error) {
	return h.ns.Waiters(name), nil
}

func TestConformance(t *testing.T) {
	conformance.Run(t, func(context.Context) (conformance.Harness, error) {
		return harness{memory.NewNamespace()}, nil
	})
}

// mem:// is a private namespace per Open, mem://NAME a shared one; a
// parameter, a userinfo or a path is an error naming what is wrong.
func TestURLs(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	if _, err := dlock.Open(ctx, "mem://?ttl=1s"); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "ttl") {
		t.Errorf("unknown parameter: got %v; want ErrInvalidOption naming ttl", err)
	}
	for _, raw := range []string{"mem://u@", "mem://u:p@x", "mem://x/y", "mem:///y"} {
		if l, err := dlock.Open(ctx, raw); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "mem://NAME") {
			if err == nil {
				l.Close()
			}
			t.Errorf("Open(%q) = %v; want ErrInvalidOption saying mem:// or mem://NAME", raw, err)
		}
	}
	open := func(raw string) *dlock.Locker {
		l, err := dlock.Open(ctx, raw)
		if err != nil {
			t.Fatalf("Open(%q): %v", raw, err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	name := t.Name()
	held, err := open("mem://"+name).TryAcquire(ctx, "u", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	if _, err := open("mem://"+name).TryAcquire(ctx, "u", nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("mem://%s opened twice: second TryAcquire = %v; want ErrNotAcquired (one shared namespace)", name, err)
	}
	for _, raw := range []string{"mem://", "mem://" + name + "-other"} {
		ls, err := open(raw).TryAcquire(ctx, "u", nil)
		if err != nil {
			t.Errorf("%s: TryAcquire = %v; want a grant (its own namespace)", raw, err)
			continue
		}
		ls.Release(ctx)
	}
}

// Under 64 goroutines on 4 clients the memory driver is a mutex: an
// unsynchronised counter is never entered twice and tokens only grow.
func TestMutualExclusion(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns := memory.NewNamespace()
	var inside atomic.Int32
	var last atomic.Uint64
	var wg sync.WaitGroup
	for c := 0; c < 4; c++ {
		l := memory.OpenLocker(ns)
		defer l.Close()
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					ls, err := l.Acquire(ctx, "mx", &dlock.AcquireOptions{TTL: 5 * time.Second})
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						t.Error("two holders at once")
					}
					if tok := ls.Token(); tok <= last.Load() {
						t.Errorf("token %d not above %d", tok, last.Load())
					} else {
						last.Store(tok)
					}
					inside.Add(-1)
					if err := ls.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
}

func TestFIFO(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns := memory.NewNamespace()
	l := memory.OpenLocker(ns)
	defer l.Close()
	first, _ := l.Acquire(ctx, "q", nil)
	order := make(chan int, 5)
	for i := 0; i < 5; i++ {
		// A Locker each: waiters of one Locker queue in the Locker (only
		// its first waits in the namespace), which the root package tests.
		w := memory.OpenLocker(ns)
		defer w.Close()
		go func() {
			ls, err := w.Acquire(ctx, "q", nil)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			ls.Release(ctx)
		}()
		for ns.Waiters("q") != i+1 { // queue them one by one
			time.Sleep(time.Millisecond)
		}
	}
	first.Release(ctx)
	for want := 0; want < 5; want++ {
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d", want, got)
		}
	}
}

func TestExpiredHolderNeverDoubleGranted(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	ns := memory.NewNamespace()
	a, b, c := memory.OpenLocker(ns), memory.OpenLocker(ns), memory.OpenLocker(ns)
	defer a.Close()
	defer b.Close()
	defer c.Close()
	for i := 0; i < 100; i++ {
		name := fmt.Sprintf("x%d", i)
		if _, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: dlock.MinTTL, NoKeepAlive: true}); err != nil {
			t.Fatal(err)
		}
		var ls *dlock.Lease
		for ls == nil { // spin so that the expiry is found before its timer fires
			ls, _ = b.TryAcquire(ctx, name, nil)
		}
		if third, err := c.TryAcquire(ctx, name, nil); err == nil {
			t.Fatalf("%s granted to two clients (tokens %d and %d)", name, ls.Token(), third.Token())
		}
		ls.Release(ctx)
	}
}
