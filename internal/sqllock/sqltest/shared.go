package sqltest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// SharedSessions checks that the native strategy's leases share sessions
// (one session holds many advisory or GET_LOCK locks) without ever
// sharing a lock: l and other are native Lockers on one server whose
// pools open at most size connections each; admin is any Locker on it.
//
//   - ManyLeases: 25 leases per pool connection are held at once by one
//     Locker, and a blocking Acquire still gets one more.
//   - SameName: two leases of one name on one Locker are never both
//     held, although a session may hold a lock twice (PostgreSQL stacks
//     advisory locks, GET_LOCK is reentrant).
//   - KilledSession: a killed session signals loss to every lease held
//     on it, and to none elsewhere.
//   - KilledKeptSession: an Acquire and a TryAcquire that find the
//     session kept without leases ended by the server go on on another.
//   - PoolFull: when blocking Acquires waiting in the server's queue
//     hold every connection of the pool, an Acquire whose context ends
//     while it waits for a connection says so (the context's error
//     wrapped, not the bare context error), and a TryAcquire too.
func SharedSessions(t *testing.T, l, other, admin *dlock.Locker, size int) {
	prefix := fmt.Sprintf("shared/%d/", time.Now().UnixNano())
	opts := &dlock.AcquireOptions{TTL: 20 * time.Second}
	t.Run("ManyLeases", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var held []*dlock.Lease
		defer func() {
			for _, ls := range held {
				ls.Release(ctx)
			}
		}()
		for i := range 25 * size {
			ls, err := l.TryAcquire(ctx, fmt.Sprintf("%smany/%d", prefix, i), opts)
			if err != nil {
				t.Fatalf("lease %d of %d on a pool of %d: %v", i+1, 25*size, size, err)
			}
			held = append(held, ls)
		}
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		defer acancel()
		ls, err := l.Acquire(actx, prefix+"many/last", opts)
		if err != nil {
			t.Fatalf("a blocking Acquire beside %d leases: %v", len(held), err)
		}
		held = append(held, ls)
		for _, ls := range held {
			if err := ls.Err(); err != nil {
				t.Fatalf("lease %q: %v", ls.Name(), err)
			}
		}
	})
	t.Run("SameName", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		name := prefix + "same"
		// Other leases first, so that the sessions hold locks already.
		var held []*dlock.Lease
		defer func() {
			for _, ls := range held {
				ls.Release(ctx)
			}
		}()
		for i := range 3 {
			ls, err := l.TryAcquire(ctx, fmt.Sprintf("%sbeside/%d", name, i), opts)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, ls)
		}
		la, err := l.TryAcquire(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if lb, err := l.TryAcquire(ctx, name, opts); !errors.Is(err, dlock.ErrNotAcquired) {
				if lb != nil {
					lb.Release(ctx)
				}
				t.Fatalf("try %d: a second lease of %q on the Locker holding it: %v, want ErrNotAcquired", i, name, err)
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		lb, err := l.Acquire(wctx, name, opts)
		wcancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			if lb != nil {
				lb.Release(ctx)
			}
			t.Fatalf("a second blocking Acquire of %q on the Locker holding it: %v, want a deadline", name, err)
		}
		got := make(chan error, 1)
		go func() {
			lb, err := l.Acquire(ctx, name, opts)
			if err == nil {
				err = lb.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(100 * time.Millisecond)
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("the waiter after the release: %v", err)
		}
	})
	t.Run("KilledKeptSession", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		for _, try := range []bool{false, true} {
			name := fmt.Sprintf("%skept/%v", prefix, try)
			ls, sid := heldOn(t, ctx, l.Acquire, admin, name, opts)
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := Kill(ctx, admin, sid); err != nil { // the session kept for the next lease
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			var err error
			if try {
				ls, err = l.TryAcquire(ctx, name, opts)
			} else {
				ls, err = l.Acquire(ctx, name, opts)
			}
			if err != nil {
				t.Fatalf("try %v: after the server ended the kept session: %v", try, err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("PoolFull", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var held []*dlock.Lease
		for i := range size {
			ls, err := other.TryAcquire(ctx, fmt.Sprintf("%sfull/%d", prefix, i), opts)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, ls)
		}
		// A waiter per connection of l's pool, each in the server's
		// queue on a session of its own.
		got := make(chan error, size)
		for i := range size {
			go func() {
				ls, err := l.Acquire(ctx, fmt.Sprintf("%sfull/%d", prefix, i), opts)
				if err == nil {
					err = ls.Release(ctx)
				}
				got <- err
			}()
		}
		defer func() {
			for _, ls := range held {
				ls.Release(ctx)
			}
			for range size {
				if err := <-got; err != nil {
					t.Errorf("a waiter: %v", err)
				}
			}
		}()
		time.Sleep(time.Second) // every waiter in the server's queue
		PoolFull(t, ctx, l, prefix+"full/free", opts, size, fmt.Sprintf("beside %d waiters", size))
	})
	t.Run("KilledSession", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		type lease struct {
			ls      *dlock.Lease
			session int64
		}
		var leases []lease
		defer func() {
			for _, x := range leases {
				x.ls.Release(ctx)
			}
		}()
		for i := range 30 {
			on := l
			if i%3 == 2 {
				on = other
			}
			ls, sid := heldOn(t, ctx, on.TryAcquire, admin, fmt.Sprintf("%skill/%d", prefix, i), opts)
			leases = append(leases, lease{ls, sid})
		}
		victim := leases[0].session
		on := 0
		for _, x := range leases {
			if x.session == victim {
				on++
			}
		}
		if on < 2 {
			t.Fatalf("the session of the first lease holds %d of the Locker's 20 leases: the leases do not share sessions", on)
		}
		if err := Kill(ctx, admin, victim); err != nil {
			t.Fatal(err)
		}
		// The first lease learns of it at its refresh; every other lease
		// of that session must learn of it then too.
		if err := leases[0].ls.Refresh(ctx); err == nil {
			t.Fatal("Refresh on a killed session: no error")
		}
		for _, x := range leases {
			if x.session != victim {
				continue
			}
			select {
			case <-x.ls.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("lease %q: its session was killed, and Done is still open 10s after a lease of it failed to refresh", x.ls.Name())
			}
		}
		for _, x := range leases {
			if x.session == victim {
				continue
			}
			if err := x.ls.Refresh(ctx); err != nil {
				t.Errorf("lease %q on another session (%d): %v after session %d was killed", x.ls.Name(), x.session, err, victim)
			}
		}
	})
}

// heldOn takes name with take and returns the lease and the server
// session that holds it (as admin's Inspect sees it).
func heldOn(t *testing.T, ctx context.Context, take func(context.Context, string, *dlock.AcquireOptions) (*dlock.Lease, error), admin *dlock.Locker, name string, opts *dlock.AcquireOptions) (*dlock.Lease, int64) {
	t.Helper()
	ls, err := take(ctx, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := HolderSession(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	return ls, sid
}

// PoolFull: an Acquire and a TryAcquire of the free name on l, whose
// pool's size connections are all in use (as where says), each fail
// when their context ends, with the context's error wrapped in
// ErrPoolExhausted, whose message gives the pool's size.
func PoolFull(t *testing.T, ctx context.Context, l *dlock.Locker, name string, opts *dlock.AcquireOptions, size int, where string) {
	t.Helper()
	for _, try := range []bool{false, true} {
		wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		var err error
		if try {
			_, err = l.TryAcquire(wctx, name, opts)
		} else {
			_, err = l.Acquire(wctx, name, opts)
		}
		wcancel()
		pool := fmt.Sprintf("(a pool of %d)", size)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, driver.ErrPoolExhausted) || err == context.DeadlineExceeded || !strings.Contains(err.Error(), pool) {
			t.Errorf("try %v: an attempt %s on a pool of %d: %v, want the context's error wrapped in ErrPoolExhausted %s", try, where, size, err, pool)
		} else {
			t.Logf("try %v: %v", try, err)
		}
	}
}
