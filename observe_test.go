package dlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/obstest"
	"github.com/dlock-go/dlock/memory"
)

// observed opens a Locker on ns with a Recorder as its Observer.
func observed(t *testing.T, ns *memory.Namespace) (*dlock.Locker, *obstest.Recorder) {
	t.Helper()
	rec := &obstest.Recorder{}
	l := dlock.NewLockerWith(memory.OpenLocker(ns).Driver(), &dlock.Options{Observer: rec})
	t.Cleanup(func() { l.Close() })
	return l, rec
}

func kinds(ks ...dlock.EventKind) []dlock.EventKind { return ks }

// An acquisition reports its attempt and its grant, the lease its
// refreshes and its release, under one ID; a refused attempt its attempt
// and why.
func TestObserverLeaseLife(t *testing.T) {
	ctx := testCtx(t)
	ns := memory.NewNamespace()
	l, rec := observed(t, ns)
	other := memory.OpenLocker(ns)
	defer other.Close()

	ls, err := l.Acquire(ctx, "obs/a", &dlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	granted := rec.Events(dlock.EventGranted)
	if len(granted) != 1 {
		t.Fatalf("granted events = %v", granted)
	}
	g := granted[0]
	if g.ID == 0 || g.Name != "obs/a" || g.Token != ls.Token() || !g.Wait || g.Backend != "memory" || g.Strategy != "in-process" || g.Permits != 0 {
		t.Errorf("granted event = %+v (token %d)", g, ls.Token())
	}
	if err := ls.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.Kinds(g.ID), kinds(dlock.EventAttempt, dlock.EventGranted, dlock.EventRefresh, dlock.EventReleased); !slices.Equal(got, want) {
		t.Errorf("events of the lease = %v, want %v", got, want)
	}
	rel := rec.Events(dlock.EventReleased)[0]
	if rel.Elapsed < 2*time.Millisecond || rel.Err != nil || rel.Token != ls.Token() {
		t.Errorf("released event = %+v: want a hold time of at least 2ms, no error, the token", rel)
	}
	if r := rec.Events(dlock.EventRefresh)[0]; r.Err != nil || r.Elapsed <= 0 || r.Outcome() != "ok" {
		t.Errorf("refresh event = %+v", r)
	}

	// Taken by another Locker: TryAcquire reports it not acquired.
	held, err := other.Acquire(ctx, "obs/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	if _, err := l.TryAcquire(ctx, "obs/a", nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire = %v", err)
	}
	na := rec.Events(dlock.EventNotAcquired)
	if len(na) != 1 || na[0].Wait || !errors.Is(na[0].Err, dlock.ErrNotAcquired) || na[0].Outcome() != "not-acquired" {
		t.Fatalf("not-acquired events = %+v", na)
	}
	if got, want := rec.Kinds(na[0].ID), kinds(dlock.EventAttempt, dlock.EventNotAcquired); !slices.Equal(got, want) {
		t.Errorf("events of the refused attempt = %v, want %v", got, want)
	}

	// A cancelled wait reports the context's error.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(cctx, "obs/a", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v", err)
	}
	if e := rec.Events(dlock.EventNotAcquired)[1]; e.Outcome() != "canceled" || !e.Wait || e.Elapsed < 15*time.Millisecond {
		t.Errorf("cancelled attempt's event = %+v", e)
	}
}

// A lease lost to the backend's signal says so, with the time left to its
// deadline; one that expired locally says its deadline ended it.
func TestObserverLost(t *testing.T) {
	ctx := testCtx(t)
	ns := memory.NewNamespace()
	l, rec := observed(t, ns)

	ls, err := l.Acquire(ctx, "obs/revoked", &dlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ns.Revoke("obs/revoked")
	lost := rec.WaitFor(t, dlock.EventLost, 1)
	if len(lost) != 1 || !errors.Is(lost[0].Err, dlock.ErrLockLost) || lost[0].Margin < 50*time.Second || lost[0].Token != ls.Token() || lost[0].Outcome() != "lost" {
		t.Fatalf("lost events = %+v", lost)
	}
	if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release = %v", err)
	}
	if got := rec.Kinds(lost[0].ID); !slices.Equal(got, kinds(dlock.EventAttempt, dlock.EventGranted, dlock.EventLost)) {
		t.Errorf("events of the revoked lease = %v", got)
	}

	ls, err = l.Acquire(ctx, "obs/expired", &dlock.AcquireOptions{TTL: 20 * time.Millisecond, NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	lost = rec.WaitFor(t, dlock.EventLost, 2)
	if len(lost) != 2 || lost[1].Name != "obs/expired" || lost[1].Margin > 0 || lost[1].Elapsed < 15*time.Millisecond {
		t.Fatalf("lost events = %+v", lost)
	}
}

// A permit says how many permits its semaphore has; an Owner's nested
// Acquire says it joined; Close reports the leases it ended and itself.
func TestObserverPermitsReentrantClose(t *testing.T) {
	ctx := testCtx(t)
	l, rec := observed(t, memory.NewNamespace())
	sem, err := l.Semaphore("obs/sem", 3)
	if err != nil {
		t.Fatal(err)
	}
	permit, err := sem.Acquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := rec.Events(dlock.EventGranted); len(g) != 1 || g[0].Permits != 3 || g[0].Token != permit.Token() {
		t.Fatalf("granted events = %+v", g)
	}
	opts := &dlock.AcquireOptions{Owner: "me"}
	outer, err := l.Acquire(ctx, "obs/r", opts)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := l.Acquire(ctx, "obs/r", opts)
	if err != nil {
		t.Fatal(err)
	}
	g := rec.Events(dlock.EventGranted)
	if len(g) != 3 || g[1].Reentrant || !g[2].Reentrant || g[2].Token != outer.Token() {
		t.Fatalf("granted events = %+v", g)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Events(dlock.EventReleased)); n != 0 {
		t.Errorf("an inner release reported %d releases, want none", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rel := rec.Events(dlock.EventReleased)
	if len(rel) != 2 || !errors.Is(rel[0].Err, dlock.ErrClosed) || !errors.Is(rel[1].Err, dlock.ErrClosed) || rel[0].Outcome() != "closed" {
		t.Fatalf("released events at Close = %+v", rel)
	}
	all := rec.Events()
	if last := all[len(all)-1]; last.Kind != dlock.EventClosed || last.Err != nil || last.Backend != "memory" {
		t.Errorf("last event = %+v, want closed", last)
	}
}

// Every attempt ends with exactly one grant or refusal, and IDs are not
// shared between attempts, under concurrency (run with -race).
func TestObserverConcurrent(t *testing.T) {
	ctx := testCtx(t)
	l, rec := observed(t, memory.NewNamespace())
	const workers, rounds = 8, 50
	done := make(chan error, workers)
	for range workers {
		go func() {
			for range rounds {
				ls, err := l.Acquire(ctx, "obs/c", nil)
				if err != nil {
					done <- err
					return
				}
				if err := ls.Release(ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range workers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	ends := map[uint64]int{}
	for _, e := range rec.Events(dlock.EventGranted, dlock.EventNotAcquired, dlock.EventReleased) {
		ends[e.ID]++
	}
	if len(ends) != workers*rounds {
		t.Fatalf("%d IDs, want %d", len(ends), workers*rounds)
	}
	for id, n := range ends {
		if n != 2 {
			t.Errorf("ID %d: %d grants and releases, want 2", id, n)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
