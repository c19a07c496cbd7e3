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
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// versionURL is the test server's URL for the version strategy.
func versionURL(t *testing.T) string {
	return sqltest.WithParams(testenv.Postgres(t).URL, "strategy", "version")
}

// queuedName returns a fresh name of the test.
// rawConn is a plain connection to the test server, closed at the end
// of the test: for checks and changes behind the driver's back.
func rawConn(t *testing.T, ctx context.Context) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, testenv.Postgres(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func queuedName(prefix string) string { return fmt.Sprintf("%s/%d", prefix, time.Now().UnixNano()) }

// acquireAsync starts a blocking Acquire of name by l; its lease (nil on
// error) arrives on the channel.
func acquireAsync(t *testing.T, ctx context.Context, l *dlock.Locker, name string, opts *dlock.AcquireOptions) <-chan *dlock.Lease {
	t.Helper()
	got := make(chan *dlock.Lease, 1)
	go func() {
		ls, err := l.Acquire(ctx, name, opts)
		if err != nil && ctx.Err() == nil {
			t.Errorf("acquire %q: %v", name, err)
		}
		got <- ls
	}()
	return got
}

// awaitWaiters waits until Inspect, by op, counts n waiters of name.
func awaitWaiters(t *testing.T, ctx context.Context, op *dlock.Locker, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := op.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if info.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: %d waiters queued, want %d", name, info.Waiters, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// within returns the lease from got, failing the test after d.
func within(t *testing.T, got <-chan *dlock.Lease, d time.Duration, what string) *dlock.Lease {
	t.Helper()
	select {
	case ls := <-got:
		if ls == nil {
			t.Fatalf("%s: not granted", what)
		}
		return ls
	case <-time.After(d):
		t.Fatalf("%s: not granted within %v", what, d)
	}
	return nil
}

// countedQueue is the prologue of the tests that count a version waiter's
// round trips: a holder's and an operator's Locker, the waiter's Locker
// on a pool whose round trips f counts, a fresh name and a 10s TTL.
func countedQueue(t *testing.T, prefix string) (ctx context.Context, holder, op, waiter *dlock.Locker, f *sqltest.Flights, name string, opts *dlock.AcquireOptions) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	url := versionURL(t)
	holder, op = sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	waiter, f = countedLocker(t, "version")
	return ctx, holder, op, waiter, f, queuedName(prefix), &dlock.AcquireOptions{TTL: 10 * time.Second}
}

// TestVersionHandoffOneRoundTrip: a release hands the lock to the queued
// waiter: the waiter is granted with no round trip of its own (the
// release's statement grants it and notifies its Locker), a larger
// token, and the holder's release sends no NOTIFY on the table's channel
// (only the waiter's Locker hears of the grant).
func TestVersionHandoffOneRoundTrip(t *testing.T) {
	ctx, holder, op, waiter, f, name, opts := countedQueue(t, "handoff")
	// The waiter's Locker has waited once already: its listener runs.
	first, err := holder.Acquire(ctx, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, ctx, waiter, name, opts)
	awaitWaiters(t, ctx, op, name, 1)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, got, 5*time.Second, "warm-up").Release(ctx); err != nil {
		t.Fatal(err)
	}

	lis := listenTo(t, ctx, testenv.Postgres(t).DSN, holder)
	ls, err := holder.Acquire(ctx, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	got = acquireAsync(t, ctx, waiter, name, opts)
	awaitWaiters(t, ctx, op, name, 1)
	r0, _ := f.Count()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wl := within(t, got, 5*time.Second, "the queued waiter")
	r1, _ := f.Count()
	if r1 != r0 {
		t.Errorf("the queued waiter made %d round trips between the release and its grant, want 0", r1-r0)
	}
	if wl.Token() <= ls.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", wl.Token(), ls.Token())
	}
	if p, ok := notified(t, ctx, lis, 300*time.Millisecond); ok {
		t.Errorf("a release that granted the queued waiter notified the table's channel (payload %q)", p)
	}
	if err := wl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// With nobody queued a release notifies nobody.
	for range 3 {
		if ls, err = holder.Acquire(ctx, name, opts); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p, ok := notified(t, ctx, lis, 300*time.Millisecond); ok {
		t.Fatalf("a release with no waiter sent a NOTIFY (payload %q)", p)
	}
}

// TestVersionGrantRace: a waiter that queues while the holder releases is
// never left to its renewal (1s with a 10s TTL): either its statement
// finds the lock free, or the release, ordered after it by the row's
// lock, sees its entry and grants it. Each round releases at a random
// moment around the waiter's statement.
func TestVersionGrantRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	url := versionURL(t)
	holder, waiter := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	w := waiter.Driver().(driver.Blocker)
	base := queuedName("grantrace")
	req := driver.Request{TTL: 10 * time.Second}
	for i := range 150 {
		req.Name = fmt.Sprintf("%s/%d", base, i)
		ls, err := holder.TryAcquire(ctx, req.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		var released time.Time
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
			if err := ls.Release(ctx); err != nil {
				t.Error(err)
			}
			released = time.Now()
		})
		dl, err := w.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if late := time.Since(released); late > 500*time.Millisecond {
			t.Fatalf("round %d: granted %v after the release (a grant missed, found by the renewal)", i, late)
		}
		if err := dl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVersionCancelledWaiterHandsOn: a waiter that gives up while the
// release grants it the lock leaves nothing behind: the grant passes on
// to the next waiter at once (not after the cancelled waiter's TTL), and
// no entry stays queued.
func TestVersionCancelledWaiterHandsOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	url := versionURL(t)
	holder, a, b, op := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	base := queuedName("cancelrace")
	long := &dlock.AcquireOptions{TTL: time.Minute}
	for i := range 20 {
		name := fmt.Sprintf("%s/%d", base, i)
		ls, err := holder.Acquire(ctx, name, long)
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithCancel(ctx)
		gotA := acquireAsync(t, actx, a, name, long)
		awaitWaiters(t, ctx, op, name, 1)
		gotB := acquireAsync(t, ctx, b, name, long)
		awaitWaiters(t, ctx, op, name, 2)
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			acancel()
		})
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if la := <-gotA; la != nil { // granted before the cancel
			if err := la.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		lb := within(t, gotB, 5*time.Second, fmt.Sprintf("round %d: the waiter behind the cancelled one", i))
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		awaitWaiters(t, ctx, op, name, 0)
	}
}

// TestVersionQueueOrder: waiters queued behind a holder whose lease
// ended without a release get the lock in their arrival order (the first
// waiter to renew hands it to the head: here the last to arrive, whose
// short TTL renews it most often), and a dead waiter's expired entry is
// skipped.
func TestVersionQueueOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := versionURL(t)
	holder, op := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	ws := []*dlock.Locker{sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)}
	name := queuedName("order")
	// A lease of the driver's: no keep-alive.
	dl, err := holder.Driver().TryAcquire(ctx, driver.Request{Name: name, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// A dead waiter's entry, expired, first in the queue.
	c := rawConn(t, ctx)
	table := sqltest.Core(op).Table().Q
	if _, err := c.Exec(ctx, "UPDATE "+table+` SET queue = '[{"w": 1, "o": "dead", "t": 60000000, "c": "nobody", "e": 0}]' WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
	// Renewals every 1s, 250ms and 100ms.
	ttls := []time.Duration{10 * time.Second, time.Second, 400 * time.Millisecond}
	var gots []<-chan *dlock.Lease
	for i, w := range ws {
		gots = append(gots, acquireAsync(t, ctx, w, name, &dlock.AcquireOptions{TTL: ttls[i]}))
		awaitWaiters(t, ctx, op, name, i+1)
	}
	// The holder's lease ends, unreleased.
	if _, err := c.Exec(ctx, "UPDATE "+table+" SET expires_at = now() WHERE name = $1", name); err != nil {
		t.Fatal(err)
	}
	last := dl.Token()
	for i, got := range gots {
		// Only waiter i may hold it now: the others are still queued.
		ls := within(t, got, 5*time.Second, fmt.Sprintf("waiter %d", i))
		for j, other := range gots[i+1:] {
			select {
			case <-other:
				t.Fatalf("waiter %d was granted before waiter %d", i+1+j, i)
			default:
			}
		}
		if ls.Token() <= last {
			t.Errorf("waiter %d: token %d, not above %d", i, ls.Token(), last)
		}
		last = ls.Token()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := op.Inspect(ctx, name); err != nil || info.Held || info.Waiters != 0 {
		t.Fatalf("after every waiter released: %+v, %v; want free, nobody queued", info, err)
	}
}

// TestVersionOldReleaser: a release of an earlier version of dlock (which
// frees the row and grants nobody) leaves a queued waiter to its renewal,
// which takes the free lock: within a quarter of the TTL, not the TTL.
func TestVersionOldReleaser(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := versionURL(t)
	holder, waiter, op := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	name := queuedName("oldrelease")
	ls, err := holder.Acquire(ctx, name, &dlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, ctx, waiter, name, &dlock.AcquireOptions{TTL: 2 * time.Second})
	awaitWaiters(t, ctx, op, name, 1)
	c := rawConn(t, ctx)
	// The release statement of dlock before the grant queue.
	if _, err := c.Exec(ctx, "UPDATE "+sqltest.Core(op).Table().Q+" SET expires_at = NULL WHERE name = $1 AND fence = $2 AND expires_at > now()", name, int64(ls.Token())); err != nil {
		t.Fatal(err)
	}
	lw := within(t, got, 1500*time.Millisecond, "the waiter after an old release")
	if err := lw.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("the old holder's release after the handover: %v, want ErrNotHeld", err)
	}
}

// TestVersionReleaseWakesOlderWaiters: a release frees the lease and
// notifies the table's channel with the name while a waiter of a dlock
// before the grant queue is registered in waiters_until, and notifies
// nothing once that registration has lapsed (the plain release that the
// uncontended path runs).
func TestVersionReleaseWakesOlderWaiters(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holder := sqltest.Open(t, ctx, versionURL(t))
	table := sqltest.Core(holder).Table()
	c := rawConn(t, ctx)
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{table.Channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	name := queuedName("olderwaiter")
	for _, registered := range []bool{true, false} {
		ls, err := holder.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// What a waiter of a dlock before the grant queue writes.
		until := "now() + interval '1 minute'"
		if !registered {
			until = "now() - interval '1 second'"
		}
		if _, err := c.Exec(ctx, "UPDATE "+table.Q+" SET waiters_until = "+until+" WHERE name = $1", name); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("release (waiter registered: %v): %v", registered, err)
		}
		var free bool
		if err := c.QueryRow(ctx, "SELECT expires_at IS NULL FROM "+table.Q+" WHERE name = $1", name).Scan(&free); err != nil || !free {
			t.Fatalf("after the release (waiter registered: %v): free %v, %v", registered, free, err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		n, err := c.WaitForNotification(wctx)
		wcancel()
		switch {
		case registered && err != nil:
			t.Fatalf("no notification for the registered waiter: %v", err)
		case registered && n.Payload != name:
			t.Fatalf("notification %q, want %q", n.Payload, name)
		case !registered && err == nil:
			t.Fatalf("notification %q with no waiter registered", n.Payload)
		case !registered && !pgconn.Timeout(err):
			t.Fatalf("waiting for no notification: %v", err)
		}
	}
}

// TestVersionOldTable: a lock table created by an earlier version of
// dlock (without waiters_until, queue and granted_to) gets the columns
// from the migration, and its leases hand over through the queue.
func TestVersionOldTable(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := rawConn(t, ctx)
	table := fmt.Sprintf("old_locks_%d", time.Now().UnixNano())
	if _, err := c.Exec(ctx, `CREATE TABLE `+table+` (name text PRIMARY KEY, fence bigint NOT NULL DEFAULT 0, owner text NOT NULL DEFAULT '',
		acquired_at timestamptz, expires_at timestamptz, session bigint)`); err != nil {
		t.Fatal(err)
	}
	url := sqltest.WithParams(srv.URL, "strategy", "version", "table", table)
	holder, waiter, op := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	ls, err := holder.Acquire(ctx, "old", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, ctx, waiter, "old", nil)
	awaitWaiters(t, ctx, op, "old", 1)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, got, 5*time.Second, "the waiter").Release(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_attribute WHERE attrelid = $1::regclass AND attname IN ('waiters_until', 'queue', 'granted_to')", table).Scan(&n); err != nil || n != 3 {
		t.Fatalf("columns added: %d, %v; want 3", n, err)
	}
}

// TestVersionTryTakesNoRowLock: a TryAcquire of a held name the Locker
// has used before neither takes nor waits for the row's lock (the plain
// UPDATE of a known name; INSERT … ON CONFLICT DO UPDATE locks the row it
// finds before its WHERE fails, and so waits here for the transaction
// that holds the row's lock, and costs every failed try of a contended
// name a lock written to the WAL).
func TestVersionTryTakesNoRowLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := versionURL(t)
	holder, other := sqltest.Open(t, ctx, url), sqltest.Open(t, ctx, url)
	name := queuedName("trynolock")
	ls, err := holder.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(context.Background())
	// other's first attempt finds the row.
	if _, err := other.TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("first try of a held name: %v, want ErrNotAcquired", err)
	}
	c := rawConn(t, ctx)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+sqltest.Core(other).Table().Q+" WHERE name = $1 FOR UPDATE", name); err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 3*time.Second)
	defer tcancel()
	if _, err := other.TryAcquire(tctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("try of a held name while another transaction holds its row's lock: %v, want ErrNotAcquired at once", err)
	}
}

// TestVersionContendedQueuesAtOnce: a blocking Acquire of a name its
// Locker found held at its last Acquire queues in one round trip (the
// wait's statement, which takes a free lease too), without the try
// first (a statement and a round trip more per contended grant).
func TestVersionContendedQueuesAtOnce(t *testing.T) {
	ctx, holder, op, waiter, f, name, opts := countedQueue(t, "queueatonce")
	for round := range 4 { // round 0 tries first and prepares the statements
		ls, err := holder.Acquire(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		r0, _ := f.Count()
		got := acquireAsync(t, ctx, waiter, name, opts)
		awaitWaiters(t, ctx, op, name, 1)
		r1, _ := f.Count()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := within(t, got, 5*time.Second, "the queued waiter").Release(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d round trips to queue", round, r1-r0)
		if round > 1 && r1-r0 != 1 {
			t.Errorf("round %d: a blocking Acquire of a name held at its last Acquire took %d round trips to queue, want 1", round, r1-r0)
		}
	}
	// Free now: the wait's statement takes it, and the next Acquires
	// try first again; each takes one round trip and its release one
	// (the first rounds may prepare statements on the pool's second
	// connection).
	for round := range 5 {
		r0, _ := f.Count()
		ls, err := waiter.Acquire(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if r1, _ := f.Count(); round > 2 && r1-r0 != 2 {
			t.Errorf("free round %d: an Acquire+Release of a free name took %d round trips, want 2", round, r1-r0)
		}
	}
}
