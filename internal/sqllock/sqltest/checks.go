package sqltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// PoolLeak runs cycles acquire/release cycles on l from 8 goroutines over
// 4 names, with a third of the Acquires cancelled after a random delay
// (while waiting in the server's queue, or just granted) and some
// TryAcquires, and then checks that no connection is left pinned:
// inUse() (the pool's connections in use) must drop to 0 and total() to
// at most maxIdle.
func PoolLeak(t *testing.T, l *dlock.Locker, cycles int, inUse, total func() int, maxIdle int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("leak/%d/", time.Now().UnixNano())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var granted, cancelled, busy int
	per := cycles / 8
	for g := range 8 {
		wg.Go(func() {
			for i := range per {
				name := prefix + fmt.Sprint((g+i)%4)
				cctx, ccancel := context.WithTimeout(ctx, time.Minute)
				var ls *dlock.Lease
				var err error
				switch i % 3 {
				case 0:
					time.AfterFunc(time.Duration(rand.N(2000))*time.Microsecond, ccancel)
					ls, err = l.Acquire(cctx, name, nil)
				case 1:
					ls, err = l.TryAcquire(cctx, name, nil)
				default:
					ls, err = l.Acquire(cctx, name, nil)
				}
				ccancel()
				mu.Lock()
				switch {
				case err == nil:
					granted++
				case errors.Is(err, context.Canceled):
					cancelled++
				case errors.Is(err, dlock.ErrNotAcquired):
					busy++
				default:
					mu.Unlock()
					t.Errorf("cycle %d: %v", i, err)
					return
				}
				mu.Unlock()
				if ls != nil {
					if err := ls.Release(ctx); err != nil {
						t.Errorf("release: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d cycles: %d granted, %d cancelled, %d busy", per*8, granted, cancelled, busy)
	if cancelled == 0 {
		t.Error("no Acquire was cancelled: the test did not test cancels")
	}
	deadline := time.Now().Add(10 * time.Second)
	for inUse() != 0 || total() > maxIdle {
		if time.Now().After(deadline) {
			t.Fatalf("after %d cycles: %d connections in use, %d open (idle size %d): a pinned connection leaked", per*8, inUse(), total(), maxIdle)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BadTables checks that table names that are not plain identifiers are
// rejected with ErrInvalidOption before any statement reaches the
// server, and that a valid one with upper-case letters works (quoted).
func BadTables(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, bad := range []string{
		`x"; DROP TABLE dlock_locks; --`, "x`; DROP TABLE dlock_locks; --", "x' OR '1'='1",
		"a.b.c", "1abc", "has space", "semi;colon", "dlock_locks--", strings.Repeat("a", 80), ".x", "x.",
	} {
		l, err := dlock.Open(ctx, WithParams(rawURL, "table", url.QueryEscape(bad)))
		if err == nil {
			l.Close()
			t.Errorf("table %q: Open succeeded", bad)
		} else if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("table %q: %v, want ErrInvalidOption", bad, err)
		}
	}
	l := Open(t, ctx, WithParams(rawURL, "table", "Odd_Case_Locks"))
	ls, err := l.TryAcquire(ctx, "x", nil)
	if err != nil {
		t.Fatalf("table Odd_Case_Locks: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Redaction opens a URL whose password is wrong (badURL carries the
// password secret) and one with an unknown parameter, and checks that
// neither error contains the password.
func Redaction(t *testing.T, badURL, secret string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, u := range []string{badURL, WithParams(badURL, "no_such_param", "1"), WithParams(badURL, "strategy", "nope")} {
		l, err := dlock.Open(ctx, u)
		if err == nil {
			l.Close()
			t.Fatalf("Open with a wrong password succeeded")
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error contains the password: %v", err)
		}
		t.Logf("error: %v", err)
	}
}

// PausedHolder checks the resource side of fencing: a holder that stops
// talking to the server (as a paused process: no keep-alive) loses the
// lock within the server's timeout (ttl, rounded up to serverStep), the
// next holder gets it no earlier than the first holder's deadline, and
// the paused holder's fenced write is rejected after the new holder's.
func PausedHolder(t *testing.T, rawURL string, ttl, serverStep time.Duration, write func(ctx context.Context, token uint64) (bool, error)) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a, b := Open(t, ctx, rawURL), Open(t, ctx, rawURL)
	name := fmt.Sprintf("paused/%d", time.Now().UnixNano())
	start := time.Now()
	la, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: ttl, NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := write(ctx, la.Token()); !ok || err != nil {
		t.Fatalf("the holder's fenced write: %v %v", ok, err)
	}
	lb, err := b.Acquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	got := time.Since(start)
	dl, _ := la.Deadline()
	if time.Now().Before(dl) {
		t.Errorf("the next holder got the lock before the paused holder's deadline")
	}
	bound := ttl.Round(serverStep) + serverStep + time.Second
	if got > bound {
		t.Errorf("the next holder got the lock %v after the paused holder's grant, want at most %v", got, bound)
	}
	t.Logf("paused holder (TTL %v) replaced after %v", ttl, got)
	if ok, err := write(ctx, lb.Token()); !ok || err != nil {
		t.Fatalf("the new holder's fenced write: %v %v", ok, err)
	}
	if ok, err := write(ctx, la.Token()); ok || err != nil {
		t.Errorf("the paused holder's fenced write after the new holder's: applied=%v err=%v, want rejected", ok, err)
	}
	if ok, err := write(ctx, lb.Token()); !ok || err != nil {
		t.Errorf("the new holder's second fenced write: %v %v", ok, err)
	}
	if err := la.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the paused holder's Release: %v, want ErrNotHeld", err)
	}
}

// EachStrategy runs f as a subtest named after each strategy of a server
// (native: its native strategy's name), with that strategy in rawURL.
func EachStrategy(t *testing.T, rawURL, native string, f func(t *testing.T, rawURL string)) {
	for _, s := range Strategies(native) {
		t.Run(s, func(t *testing.T) { f(t, WithParams(rawURL, "strategy", s)) })
	}
}

// PausedHolderEach runs PausedHolder (TTL 1s) for every strategy of a
// backend, writing with write to a table that create makes, or resets to
// fence 0, before each strategy (a driver's FencedUpdate on its own
// accounts table).
func PausedHolderEach(t *testing.T, rawURL, native string, serverStep time.Duration, create func(ctx context.Context) error, write func(ctx context.Context, token uint64) (bool, error)) {
	EachStrategy(t, rawURL, native, func(t *testing.T, rawURL string) {
		// Each strategy's tokens come from its own table's counter: the
		// resource starts afresh (create resets its fence), or a strategy
		// whose counter is behind another's would find its writes stale.
		if err := create(t.Context()); err != nil {
			t.Fatal(err)
		}
		PausedHolder(t, rawURL, time.Second, serverStep, write)
	})
}

// PoolLeaks runs PoolLeak on the connection-bound strategies (forupdate and
// native) with a pool of 16 connections that open makes for the strategy:
// the Locker and the pool's in-use and total counts.
func PoolLeaks(t *testing.T, native string, open func(t *testing.T, strategy string, size int) (l *dlock.Locker, inUse, total func() int)) {
	cycles := 10000
	if raceEnabled {
		cycles = 2000
	}
	for _, s := range []string{"forupdate", native} {
		t.Run(s, func(t *testing.T) {
			l, inUse, total := open(t, s, 16)
			defer l.Close()
			PoolLeak(t, l, cycles, inUse, total, 16)
		})
	}
}
