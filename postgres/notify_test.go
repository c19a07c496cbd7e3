package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/sqllock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// listenTo opens a connection of its own that LISTENs on the channel of
// l's table (l has reached the server).
func listenTo(t *testing.T, ctx context.Context, dsn string, l *dlock.Locker) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{sqltest.Core(l).Table().Channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return c
}

// notified returns the payload of the next notification on c within d
// ("" and false when none came).
func notified(t *testing.T, ctx context.Context, c *pgx.Conn, d time.Duration) (string, bool) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	n, err := c.WaitForNotification(wctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return "", false
		}
		t.Fatal(err)
	}
	return n.Payload, true
}

// TestVersionNotifiesOnlyWaiters: a version release notifies the table's
// channel when the name has a registered waiter, and sends no NOTIFY when
// nobody waits (a NOTIFY costs the release tens of microseconds).
func TestVersionNotifiesOnlyWaiters(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := sqltest.WithParams(srv.URL, "strategy", "version")
	holder, waiter := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	name := fmt.Sprintf("notify/%d", time.Now().UnixNano())
	ls, err := holder.TryAcquire(ctx, name, nil) // reaches the server: the channel is known
	if err != nil {
		t.Fatal(err)
	}
	lis := listenTo(t, ctx, srv.DSN, holder)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Acquire watches the name before its attempt; granted at once, it
	// registers nothing.
	for range 3 {
		if ls, err = holder.Acquire(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p, ok := notified(t, ctx, lis, 300*time.Millisecond); ok {
		t.Fatalf("a release with no waiter sent a NOTIFY (payload %q)", p)
	}

	// A waiter watches and fails an attempt, which registers it: the next
	// release notifies it.
	if ls, err = holder.TryAcquire(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	wake := watchAndFail(t, ctx, waiter, name)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if p, ok := notified(t, ctx, lis, 5*time.Second); !ok || p != name {
		t.Fatalf("a release with a registered waiter: notification %q, %v; want %q", p, ok, name)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("the registered waiter was not woken")
	}

	// Another name without a waiter still sends none, while this one's
	// waiter waits.
	other := name + "/other"
	ls2, err := holder.TryAcquire(ctx, other, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if p, ok := notified(t, ctx, lis, 300*time.Millisecond); ok {
		t.Fatalf("the release of %q, which has no waiter, sent a NOTIFY (payload %q)", other, p)
	}
}

// TestVersionWakeRace: a waiter whose attempt (which registers it) races
// with the holder's release is never left waiting: either its attempt
// after Watch finds the lock free, or the release notifies it. Each round uses a new name (so that
// the waiter's registration is written in that round) and releases at a
// random moment around the waiter's registration; the driver's Watch is
// used directly, with no fallback timer to hide a lost wake-up.
func TestVersionWakeRace(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	url := sqltest.WithParams(srv.URL, "strategy", "version")
	holder, waiter := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	w := waiter.Driver()
	base := fmt.Sprintf("race/%d", time.Now().UnixNano())
	woken := 0 // rounds whose first attempt failed and a release woke the waiter
	for i := range 150 {
		name := fmt.Sprintf("%s/%d", base, i)
		ls, err := holder.TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
			if err := ls.Release(ctx); err != nil {
				t.Error(err)
			}
		})
		wake, stop, err := w.(driver.Watcher).Watch(ctx, driver.Request{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		req := driver.Request{Name: name, TTL: 10 * time.Second}
		for tries := 0; ; tries++ {
			dl, err := w.TryAcquire(ctx, req)
			if err == nil {
				_ = dl.Release(ctx)
				break
			}
			if !errors.Is(err, driver.ErrNotAcquired) {
				t.Fatal(err)
			}
			select {
			case <-wake:
				if tries == 0 {
					woken++
				}
				continue // the release happened: the next attempt gets it
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: the attempt after Watch failed and no release woke the waiter (a lost wake-up)", i)
			}
		}
		stop()
		wg.Wait()
	}
	t.Logf("150 rounds: in %d the first attempt failed and the release woke the waiter; in the others it found the lock free", woken)
}

// TestVersionOldTable: a lock table created before waiters_until existed
// gets the column from the migration, and its version leases work.
func TestVersionOldTable(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	table := fmt.Sprintf("old_locks_%d", time.Now().UnixNano())
	if _, err := c.Exec(ctx, `CREATE TABLE `+table+` (name text PRIMARY KEY, fence bigint NOT NULL DEFAULT 0, owner text NOT NULL DEFAULT '',
		acquired_at timestamptz, expires_at timestamptz, session bigint)`); err != nil {
		t.Fatal(err)
	}
	l := sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", "version", "table", table))
	ls, err := l.Acquire(ctx, "old", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'waiters_until'", table).Scan(&n); err != nil || n != 1 {
		t.Fatalf("waiters_until columns: %d, %v; want 1", n, err)
	}
}

// TestVersionRegistrationRenewed: a waiter's registration outlives its
// first 10s while it waits (the hub renews it), so a release after that
// still notifies it.
func TestVersionRegistrationRenewed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 12s")
	}
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := sqltest.WithParams(srv.URL, "strategy", "version")
	holder, waiter := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	name := fmt.Sprintf("renew/%d", time.Now().UnixNano())
	ls, err := holder.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wake := watchAndFail(t, ctx, waiter, name)
	time.Sleep(12 * time.Second) // past the first registration's 10s
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("a release 12s into the wait did not wake the waiter: its registration was not renewed")
	}
}

// watchAndFail makes l's driver watch name and fail one attempt at it
// (held by another), which registers l as its waiter; the watch ends
// with the test.
func watchAndFail(t *testing.T, ctx context.Context, l *dlock.Locker, name string) <-chan struct{} {
	t.Helper()
	w := l.Driver()
	wake, stop, err := w.(driver.Watcher).Watch(ctx, driver.Request{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if _, err := w.TryAcquire(ctx, driver.Request{Name: name, TTL: time.Second}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("the waiter's attempt at a held name: %v, want ErrNotAcquired", err)
	}
	return wake
}

// TestSemaphoreWake: on every strategy, the release of a permit notifies
// the table's channel with the semaphore's wake-up key, which wakes its
// watcher through the driver's Watch alone (no poll can stand in for it
// here), and not the watcher of the lock of the same name (on the pinned
// strategies, whose locks wait in the server's queue, a lock's watch is
// a closed channel: poll).
func TestSemaphoreWake(t *testing.T) {
	srv := testenv.Postgres(t)
	for _, strategy := range sqltest.Strategies("advisory") {
		t.Run(strategy, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			url := sqltest.WithParams(srv.URL, "strategy", strategy)
			holder, waiter := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
			name := fmt.Sprintf("semwake/%d", time.Now().UnixNano())
			s, err := holder.Semaphore(name, 1)
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.TryAcquire(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			lis := listenTo(t, ctx, srv.DSN, holder)
			w := waiter.Driver().(driver.Watcher)
			semWake, stop, err := w.Watch(ctx, driver.Request{Name: name, Permits: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			var lockWake <-chan struct{}
			if strategy == "version" {
				wake, stopLock, err := w.Watch(ctx, driver.Request{Name: name})
				if err != nil {
					t.Fatal(err)
				}
				defer stopLock()
				lockWake = wake
			}
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if payload, ok := notified(t, ctx, lis, 10*time.Second); !ok || payload != sqllock.SemWakeKey(name) {
				t.Fatalf("notification after the release: %q, %v; want %q", payload, ok, sqllock.SemWakeKey(name))
			}
			select {
			case <-semWake:
			case <-ctx.Done():
				t.Fatal("the semaphore's watcher was not woken by the release")
			}
			select {
			case <-lockWake:
				t.Fatal("the lock's watcher was woken by a permit's release")
			default:
			}
		})
	}
}
