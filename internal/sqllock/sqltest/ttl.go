package sqltest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/sqllock"
)

// TTLRange checks a strategy's declared TTL range against the server: a
// lease of the declared MaxTTL, not kept alive, is still held on the
// server seconds later (a TTL that overflowed on its way to the server
// would have become a timeout of a second or less), and a TTL just outside
// the range is refused before any server call.
func TTLRange(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a := Open(t, ctx, rawURL)
	b := Open(t, ctx, rawURL)
	caps := a.Capabilities()
	name := "ttlrange/" + time.Now().Format(time.RFC3339Nano)
	hi := caps.MaxTTL
	if hi == 0 {
		t.Errorf("%s/%s declares no MaxTTL", caps.Backend, caps.Strategy)
		hi = math.MaxInt64 // a driver with no limit must honour any TTL
	} else {
		if _, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: hi + 1}); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("TTL MaxTTL+1ns (%v): %v, want ErrInvalidOption", hi+1, err)
		}
	}
	if lo := max(caps.MinTTL, dlock.MinTTL); true {
		if _, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: lo - 1}); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("TTL MinTTL-1ns (%v): %v, want ErrInvalidOption", lo-1, err)
		}
	}
	for _, ttl := range []time.Duration{hi, hi - time.Second} {
		la, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: ttl, NoKeepAlive: true})
		if err != nil {
			t.Fatalf("TTL %v: %v", ttl, err)
		}
		time.Sleep(2 * time.Second)
		select {
		case <-la.Done():
			t.Errorf("TTL %v: the lease ended after 2s: %v", ttl, la.Err())
		default:
		}
		if lb, err := b.TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TTL %v: after 2s another Locker's TryAcquire: %v, want ErrNotAcquired (the server ended a lease it was asked to keep for %v)", ttl, err, ttl)
			if lb != nil {
				_ = lb.Release(ctx)
			}
		}
		if err := la.Release(ctx); err != nil {
			t.Errorf("TTL %v: release: %v", ttl, err)
		}
	}
}

// EndedLeaseFreesLock checks that a lease that ended for its holder (its
// local deadline passed without a refresh) no longer holds the lock on the
// server: another client can take it at once, not only after the server's
// own idle timeout, which may count whole seconds.
func EndedLeaseFreesLock(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a := Open(t, ctx, rawURL)
	b := Open(t, ctx, rawURL)
	ttl := max(a.Capabilities().MinTTL, 20*time.Millisecond)
	for i := range 3 {
		name := "ended/" + time.Now().Format(time.RFC3339Nano)
		la, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: ttl, NoKeepAlive: true})
		if err != nil {
			t.Fatalf("TTL %v: %v", ttl, err)
		}
		<-la.Done()
		if err := la.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("refresh after Done: %v, want ErrNotHeld", err)
		}
		ended := time.Now()
		const bound = 200 * time.Millisecond
		for {
			lb, err := b.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: 5 * time.Second})
			if err == nil {
				_ = lb.Release(ctx)
				break
			}
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("round %d: TryAcquire: %v", i, err)
			}
			if time.Since(ended) > bound {
				t.Fatalf("round %d: a lease of TTL %v ended for its holder, and %v later the server still held it for it", i, ttl, bound)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// CancelledAcquires checks that Acquires cancelled at random moments (in
// flight to the server, granted with the reply lost, waiting) leave no
// lease behind: afterwards a fresh Locker takes the lock at once.
func CancelledAcquires(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	a := Open(t, ctx, rawURL)
	for round := range 10 {
		name := fmt.Sprintf("cancelled/%d/%s", round, time.Now().Format(time.RFC3339Nano))
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() {
				cctx, ccancel := context.WithCancel(ctx)
				time.AfterFunc(time.Duration(rand.N(3000))*time.Microsecond, ccancel)
				defer ccancel()
				if ls, err := a.Acquire(cctx, name, nil); err == nil {
					if err := ls.Release(ctx); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			})
		}
		wg.Wait()
		b := Open(t, ctx, rawURL)
		start := time.Now()
		const bound = 200 * time.Millisecond
		for {
			lb, err := b.TryAcquire(ctx, name, nil)
			if err == nil {
				_ = lb.Release(ctx)
				break
			}
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryAcquire: %v", err)
			}
			if time.Since(start) > bound {
				t.Fatalf("round %d: after 30 cancelled Acquires, the lock was still held %v later: a cancelled Acquire left a lease behind", round, bound)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// SharedTable checks that two configurations that name one lock exclude
// each other: every pair of strategies on one table (the second is
// refused with ErrInvalidOption, or cannot take a name the first holds),
// and each strategy under every spelling of one table (spellings[s] are
// names of one physical table).
func SharedTable(t *testing.T, rawURL string, strategies []string, spellings func(table string) []string) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e9)
	const name = "shared"
	for _, s1 := range strategies {
		for _, s2 := range strategies {
			if s1 == s2 {
				continue
			}
			table := fmt.Sprintf("pair_%s_%s_%s", s1, s2, suffix)
			a := Open(t, ctx, WithParams(rawURL, "strategy", s1, "table", table))
			la, err := a.TryAcquire(ctx, name, nil)
			if err != nil {
				t.Fatalf("%s on %s: %v", s1, table, err)
			}
			b, err := dlock.Open(ctx, WithParams(rawURL, "strategy", s2, "table", table))
			if err != nil {
				if !errors.Is(err, dlock.ErrInvalidOption) {
					t.Errorf("%s on %s, held by %s: Open: %v, want ErrInvalidOption", s2, table, s1, err)
				}
			} else {
				tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
				lb, err := b.TryAcquire(tctx, name, nil)
				tcancel()
				switch {
				case err == nil:
					t.Errorf("%s and %s on one table (%s) both hold %q", s1, s2, table, name)
					_ = lb.Release(ctx)
				case errors.Is(err, dlock.ErrInvalidOption):
				case !errors.Is(err, dlock.ErrNotAcquired):
					t.Errorf("%s on %s, held by %s: TryAcquire: %v, want ErrNotAcquired or ErrInvalidOption", s2, table, s1, err)
				}
				b.Close()
			}
			_ = la.Release(ctx)
		}
	}
	for _, s := range strategies {
		names := spellings(fmt.Sprintf("spell_%s_%s", s, suffix))
		a := Open(t, ctx, WithParams(rawURL, "strategy", s, "table", names[0]))
		la, err := a.TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatalf("%s on %s: %v", s, names[0], err)
		}
		for _, other := range names[1:] {
			b := Open(t, ctx, WithParams(rawURL, "strategy", s, "table", other))
			tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
			lb, err := b.TryAcquire(tctx, name, nil)
			tcancel()
			if err == nil {
				t.Errorf("%s: table=%s and table=%s (one table) both hold %q", s, names[0], other, name)
				_ = lb.Release(ctx)
			} else if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("%s on %s, held through %s: TryAcquire: %v, want ErrNotAcquired", s, other, names[0], err)
			}
		}
		_ = la.Release(ctx)
	}
}

// RecreatedCounter checks that tokens keep increasing when the lock table
// and its token counter are dropped and created again (by the driver's
// migration): drop drops both.
func RecreatedCounter(t *testing.T, rawURL string, drop func(ctx context.Context, table string) error) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	table := fmt.Sprintf("recreated_%d", time.Now().UnixNano()%1e9)
	u := WithParams(rawURL, "table", table)
	var last uint64
	for round := range 3 {
		l, err := dlock.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			ls, err := l.TryAcquire(ctx, "recreated", nil)
			if err != nil {
				t.Fatal(err)
			}
			if ls.Token() <= last {
				t.Errorf("round %d: token %d after %d: the recreated counter started again", round, ls.Token(), last)
			}
			last = ls.Token()
			_ = ls.Release(ctx)
		}
		l.Close()
		if err := drop(ctx, table); err != nil {
			t.Fatal(err)
		}
	}
}

// Safety runs the lease-safety checks on every strategy of a server (native
// names the dialect's connection-lock strategy): the declared TTL range
// holds on the server, a lease that ended locally frees the lock at once,
// and cancelled Acquires leave no lease behind. Each strategy gets tables of
// its own.
func Safety(t *testing.T, rawURL, native string) {
	for _, s := range Strategies(native) {
		t.Run("TTLRange/"+s, func(t *testing.T) {
			TTLRange(t, WithParams(rawURL, "strategy", s, "table", "ttl_"+s))
		})
		t.Run("EndedLeaseFreesLock/"+s, func(t *testing.T) {
			EndedLeaseFreesLock(t, WithParams(rawURL, "strategy", s, "table", "ended_"+s))
		})
		t.Run("CancelledAcquires/"+s, func(t *testing.T) {
			CancelledAcquires(t, WithParams(rawURL, "strategy", s, "table", "cancelled_"+s))
		})
	}
}

// FuzzTimeouts fuzzes the durations dialect d sends to its server, for a
// duration ttl used as a lease's TTL and as a wait: check(t, ttl) checks
// the dialect's own timeouts, and the Version expiry is checked for every
// dialect (versionExpiry). The seeds are the durations where conversions
// overflow or round: the extremes of int64, 0 and ±1, the server's unit
// and 1ns either side, and each of bounds and 1ns past it.
func FuzzTimeouts(f *testing.F, d sqllock.Dialect, unit time.Duration, bounds []time.Duration, check func(t *testing.T, ttl time.Duration)) {
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second, math.MaxInt64 - 1, 0, 1, -1, math.MinInt64,
		unit - 1, unit, unit + 1} {
		f.Add(int64(d))
	}
	for _, b := range bounds {
		f.Add(int64(b))
		f.Add(int64(b + 1))
	}
	f.Fuzz(func(t *testing.T, n int64) {
		ttl := time.Duration(n)
		check(t, ttl)
		versionExpiry(t, d, ttl)
	})
}

// versionExpiry checks, for a ttl in d's Version range, the expiry the
// dialect sends: the server's now plus the TTL in whole microseconds,
// never shorter than ttl, and far inside a DATETIME(6) or a timestamptz
// for decades.
func versionExpiry(t *testing.T, d sqllock.Dialect, ttl time.Duration) {
	t.Helper()
	if lo, hi := d.TTLRange(sqllock.Version); ttl >= lo && ttl <= hi {
		us := sqllock.Micros(ttl)
		if time.Duration(us)*time.Microsecond < ttl || time.Now().Add(time.Duration(us)*time.Microsecond).Year() > 2200 {
			t.Fatalf("version expiry for %v: %dµs", ttl, us)
		}
	}
}

// VersionMiss checks what a version TryAcquire tells when it takes
// nothing, on the statements a Locker uses once it knows a name's row
// (PostgreSQL's take answers nothing on a miss, and a second statement
// reads the row: sqllock.VersionPeeker): a held lock is ErrNotAcquired,
// with the holder's remaining time when the dialect reads it (retryAfter:
// driver.NotAcquiredError.RetryAfter, within the holder's TTL); a lock whose row was deleted by hand behind a
// Locker that knew it is taken again, with a token above every earlier
// one (by a TryAcquire and by a blocking Acquire); and after a free lock
// was released, the next TryAcquire takes it.
// del deletes a name's row of a table.
func VersionMiss(t *testing.T, rawURL string, retryAfter bool, del func(ctx context.Context, table, name string) error) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	table := fmt.Sprintf("vmiss_%d", time.Now().UnixNano()%1e9)
	u := WithParams(rawURL, "strategy", "version", "table", table)
	a, b := Open(t, ctx, u), Open(t, ctx, u)
	const name = "vmiss"
	// b learns the row.
	ls, err := b.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := ls.Token()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	const ttl = 20 * time.Second
	held, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if held.Token() <= last {
		t.Errorf("token %d after %d", held.Token(), last)
	}
	last = held.Token()
	_, err = b.TryAcquire(ctx, name, nil)
	var na *driver.NotAcquiredError
	switch {
	case !errors.Is(err, dlock.ErrNotAcquired):
		t.Fatalf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	case !retryAfter:
	case !errors.As(err, &na):
		t.Errorf("TryAcquire of a held lock: %v: no driver.NotAcquiredError", err)
	case na.RetryAfter <= ttl/2 || na.RetryAfter > ttl:
		t.Errorf("TryAcquire of a lock held for %v: RetryAfter %v, want the holder's remaining time", ttl, na.RetryAfter)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// granted checks a grant (a token above the last) and releases it.
	granted := func(what string, ls *dlock.Lease, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ls.Token() <= last {
			t.Errorf("%s: token %d after %d", what, ls.Token(), last)
		}
		last = ls.Token()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ls, err = b.TryAcquire(ctx, name, nil)
	granted("TryAcquire of a released lock", ls, err)
	if err := del(ctx, table, name); err != nil {
		t.Fatal(err)
	}
	for i, l := range []*dlock.Locker{b, a} {
		ls, err := l.TryAcquire(ctx, name, nil)
		granted(fmt.Sprintf("TryAcquire %d after the row was deleted", i), ls, err)
	}
	// A blocking Acquire's first try answers a miss without reading the
	// row: a deleted row is made again by what it does next.
	if err := del(ctx, table, name); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ls, err = b.Acquire(actx, name, nil)
	granted("Acquire after the row was deleted", ls, err)
}
