package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/postgres"
)

// TestForUpdateAnnouncesOnlyWithOwner: a forupdate lease with an Owner
// announces its token and owner in its session's application_name, where
// Inspect reads them; one without announces nothing (setting
// application_name costs every grant), and Inspect reports it held, its
// owner and token unknown, as on advisory.
func TestForUpdateAnnouncesOnlyWithOwner(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sc := rawConn(t, ctx)
	l := sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", "forupdate"))
	const name = "announce"
	announced := func(pid int64) string {
		t.Helper()
		var app string
		if err := sc.QueryRow(ctx, "SELECT application_name FROM pg_stat_activity WHERE pid = $1", pid).Scan(&app); err != nil {
			t.Fatal(err)
		}
		return app
	}
	holder := func() int64 {
		t.Helper()
		pid, err := sqltest.HolderSession(ctx, l, name)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	for _, owner := range []string{"", "announce-host/7"} {
		ls, err := l.Acquire(ctx, name, &dlock.AcquireOptions{Owner: owner, NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		info, err := l.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		app := announced(holder())
		if owner == "" {
			if app != "" || !info.Held || info.Owner != "" || info.Fence != 0 {
				t.Errorf("without an Owner: application_name %q, inspect %+v; want nothing announced, held, owner and fence unknown", app, info)
			}
		} else if want := "dlock " + strconv.FormatUint(ls.Token(), 10) + " " + owner; app != want || !info.Held || info.Owner != owner || info.Fence != ls.Token() {
			t.Errorf("with an Owner: application_name %q, inspect %+v; want %q, held by %q with fence %d", app, info, want, owner, ls.Token())
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestForUpdatePoolFull: each forupdate lease pins a connection (its row
// lock lives in its transaction), so a Locker holds at most
// pool_max_conns of them at once; one more Acquire or TryAcquire, of a
// free name, waits for a connection and, when its context ends, fails
// with ErrPoolExhausted naming the pool's size and wrapping the
// context's error (dlockbench's scale leases=100 and 1000 rows meet it
// on the default pool of 32); a lease released gives its connection to
// the next attempt.
func TestForUpdatePoolFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const size = 3
	l := sqltest.Open(t, ctx, sqltest.WithParams(testenv.Postgres(t).URL, "strategy", "forupdate", "pool_max_conns", strconv.Itoa(size), "table", "poolfull"))
	prefix := "poolfull/" + strconv.FormatInt(time.Now().UnixNano(), 10) + "/"
	var held []*dlock.Lease
	for i := range size {
		ls, err := l.TryAcquire(ctx, prefix+strconv.Itoa(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	sqltest.PoolFull(t, ctx, l, prefix+"free", nil, size, fmt.Sprintf("beside %d forupdate leases", size))
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err := l.TryAcquire(ctx, prefix+"free", nil)
	if err != nil {
		t.Fatalf("an attempt after a lease's release: %v", err)
	}
	for _, ls := range append(held[1:], ls) {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestForUpdateSessionIdleTimeout: on the driver's own connections a
// forupdate release makes the lease's TTL the session's
// idle_in_transaction_session_timeout, and the next grant of the same TTL
// on that session skips setting it (a cost of the server's per grant).
// The server still ends an idle lease at its TTL when its grant set
// nothing, and a session's value shorter than a lease's TTL never ends
// that lease early: such a grant sets its own, for its transaction.
func TestForUpdateSessionIdleTimeout(t *testing.T) {
	ctx, sc, l, other := oneSession(t, "sessidle", "forupdate")
	const name = "sessidle"
	const short, long = 300 * time.Millisecond, 3 * time.Second
	// grant takes the lease with ttl and reports whether its statement
	// set the idle timeout (the holder's last statement, read from
	// pg_stat_activity).
	grant := func(ttl time.Duration) (*dlock.Lease, bool) {
		t.Helper()
		ls, err := l.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: ttl, NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		return ls, strings.Contains(holderQuery(t, ctx, sc, other, name), "idle_in_transaction_session_timeout")
	}
	release := func(ls *dlock.Lease) {
		t.Helper()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		ttl  time.Duration
		sets bool // the grant sets the idle timeout
	}{
		{short, true},  // a new session: set; the release makes it the session's
		{long, true},   // the session's is shorter: set for this lease
		{long, false},  // the session's is the TTL
		{short, true},  // the session's is longer: set
		{short, false}, // the session's is the TTL
	}
	for i, s := range steps {
		ls, sets := grant(s.ttl)
		if sets != s.sets {
			t.Fatalf("step %d (TTL %v): the grant set the idle timeout: %v, want %v", i, s.ttl, sets, s.sets)
		}
		if i == 1 {
			// The session's 300ms must not end this lease of 3s.
			time.Sleep(time.Second)
			if _, err := other.TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("a lease of %v taken by another Locker after 1s idle: %v", long, err)
			}
		}
		if i == len(steps)-1 {
			break
		}
		release(ls)
	}
	// The last grant set nothing: the session's own timeout ends it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ls, err := other.TryAcquire(ctx, name, nil)
		if err == nil {
			release(ls)
			break
		}
		if !errors.Is(err, dlock.ErrNotAcquired) || time.Now().After(deadline) {
			t.Fatalf("the idle lease of %v without its own setting was not ended by the server: %v", short, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// oneSession opens, on a table of its own (named after prefix), a Locker
// of strategy with one connection (every lease and wait of it runs on the
// same session) and another Locker, and a raw connection for
// pg_stat_activity.
func oneSession(t *testing.T, prefix, strategy string) (ctx context.Context, sc *pgx.Conn, l, other *dlock.Locker) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	url := sqltest.WithParams(srv.URL, "strategy", strategy, "table", fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()))
	return ctx, rawConn(t, ctx), sqltest.Open(t, ctx, url+"&pool_max_conns=1"), sqltest.Open(t, ctx, url)
}

// TestWaitEndsOnServer: a blocking Acquire of a held lock that reaches its
// deadline is ended by the server (lock_timeout, sqllock.WaitMargin
// before the deadline), not by the context, whose interruption of the
// statement costs the connection: the Locker's one session is the same
// after such waits. (Ended at the deadline or later, the wait always
// lost that race: its timer starts when the statement reaches the
// server.)
func TestWaitEndsOnServer(t *testing.T) {
	for _, strategy := range []string{"forupdate", "advisory"} {
		t.Run(strategy, func(t *testing.T) {
			ctx, _, l, other := oneSession(t, "waitends", strategy)
			const name = "waitends"
			session := func() int64 {
				t.Helper()
				ls, err := l.TryAcquire(ctx, name, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer ls.Release(ctx)
				pid, err := sqltest.HolderSession(ctx, other, name)
				if err != nil {
					t.Fatal(err)
				}
				return pid
			}
			before := session()
			held, err := other.TryAcquire(ctx, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, wait := range []time.Duration{300 * time.Millisecond, 30 * time.Millisecond, 700 * time.Millisecond} {
				actx, cancel := context.WithTimeout(ctx, wait)
				start := time.Now()
				_, err := l.Acquire(actx, name, nil)
				took := time.Since(start)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || took < wait {
					t.Fatalf("a wait of %v for a held lock ended after %v with %v; want its deadline", wait, took, err)
				}
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if after := session(); after != before {
				t.Errorf("the Locker's one session was %d before three waits that reached their deadline and is %d after: a wait was interrupted, not ended by the server", before, after)
			}
		})
	}
}

// holderQuery is the last statement of the session that holds name.
func holderQuery(t *testing.T, ctx context.Context, sc *pgx.Conn, admin *dlock.Locker, name string) string {
	t.Helper()
	pid, err := sqltest.HolderSession(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	return sessionQuery(t, ctx, sc, pid)
}

func sessionQuery(t *testing.T, ctx context.Context, sc *pgx.Conn, pid int64) string {
	t.Helper()
	var query string
	if err := sc.QueryRow(ctx, "SELECT query FROM pg_stat_activity WHERE pid = $1", pid).Scan(&query); err != nil {
		t.Fatal(err)
	}
	return query
}

// TestForUpdateSessionLockTimeout: on the driver's own connections a
// release makes a blocking grant's lock_timeout the session's, rounded
// down to a power of two milliseconds (1024 at least: a shorter one is not
// kept), and a later blocking grant whose wait that serves (no more than
// the wait, more than half of it) sets none. A wait that relies on the session's value still ends at its own
// deadline, by the server (the connection is kept), and still takes a
// lock freed after the session's value has run out.
func TestForUpdateSessionLockTimeout(t *testing.T) {
	ctx, sc, l, other := oneSession(t, "sesswait", "forupdate")
	const name = "sesswait"
	// acquire takes name with a wait of at most wait, and reports whether
	// the grant set lock_timeout.
	acquire := func(wait time.Duration) bool {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		ls, err := l.Acquire(actx, name, &dlock.AcquireOptions{NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		sets := strings.Contains(holderQuery(t, ctx, sc, other, name), "lock_timeout")
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return sets
	}
	steps := []struct {
		wait time.Duration
		sets bool
	}{
		// The server's wait is the deadline less sqllock.WaitMargin.
		{1500 * time.Millisecond, true},  // a new session: set; the session's becomes 1024ms
		{1500 * time.Millisecond, false}, // 1024ms serves a wait of ~1480ms
		{5 * time.Second, true},          // 1024ms does not serve ~4980ms; the session's becomes 4096ms
		{1500 * time.Millisecond, true},  // 4096ms would end the wait after its deadline; 1024ms again
		{1900 * time.Millisecond, false}, // 1024ms serves ~1880ms
	}
	for i, s := range steps {
		if sets := acquire(s.wait); sets != s.sets {
			t.Fatalf("step %d (wait %v): the grant set lock_timeout: %v, want %v", i, s.wait, sets, s.sets)
		}
	}
	held, err := other.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	// waiting is the session of l that waits for name, and its statement.
	waiting := func() (pid int64, query string) {
		t.Helper()
		for end := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
			err := sc.QueryRow(ctx, "SELECT pid, query FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND query LIKE '%sesswait%'").Scan(&pid, &query)
			if err == nil || time.Now().After(end) {
				if err != nil {
					t.Fatalf("no session waits for %q: %v", name, err)
				}
				return pid, query
			}
		}
	}
	// The session's 1024ms serves a wait of 1900ms: the server ends it
	// after 1024ms, and the Locker waits again for the rest, setting that.
	const wait = 1900 * time.Millisecond
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(actx, name, nil)
		if err == nil {
			err = errors.Join(errors.New("granted"), ls.Release(ctx))
		}
		done <- err
	}()
	pid, query := waiting()
	if strings.Contains(query, "lock_timeout") {
		t.Errorf("the first wait set lock_timeout, which the session's serves: %s", query)
	}
	time.Sleep(time.Until(start.Add(1400 * time.Millisecond)))
	if again, query := waiting(); again != pid || !strings.Contains(query, "lock_timeout") {
		t.Errorf("after the session's 1024ms the wait is session %d running %q; want session %d setting its own lock_timeout", again, query, pid)
	}
	err = <-done
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took < wait || took > wait+time.Second {
		t.Fatalf("a wait of %v for a held lock ended after %v with %v; want the deadline", wait, took, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A statement that failed (the wait, ended by the server) makes the
	// Locker forget what the session has: the next grants set their own,
	// a short wait's (300ms) is not kept, a wait of 1500ms's is (1024ms),
	// and the next relies on it.
	for i, sets := range []bool{true, true, false} {
		if got := acquire([]time.Duration{300 * time.Millisecond, 1500 * time.Millisecond, 1500 * time.Millisecond}[i]); got != sets {
			t.Errorf("after a wait that timed out, grant %d set lock_timeout: %v, want %v", i, got, sets)
		}
	}
	// The server ended the waits: the connection is the same.
	ls, err := l.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := sqltest.HolderSession(ctx, other, name); err != nil || again != pid {
		t.Errorf("after the wait ended, l's session is %d (%v); want %d, kept", again, err, pid)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A lock freed after the session's value (1024ms) ran out is still
	// taken.
	if held, err = other.TryAcquire(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	actx2, cancel2 := context.WithTimeout(ctx, wait)
	defer cancel2()
	go func() {
		ls, err := l.Acquire(actx2, name, nil)
		if err == nil {
			err = ls.Release(ctx)
		}
		done <- err
	}()
	waiting()
	time.Sleep(time.Until(start.Add(1300 * time.Millisecond)))
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a lock freed 1.3s into a wait of %v, after the session's 1024ms: %v", wait, err)
	}
}

// TestForUpdateUserPoolKeepsSettings: on a pool passed in (OpenLocker)
// a forupdate lease changes none of its session's settings.
func TestForUpdateUserPoolKeepsSettings(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pc, err := pgxpool.ParseConfig(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := postgres.OpenLocker(p, &postgres.Options{Strategy: "forupdate", Table: fmt.Sprintf("userpool_%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		ls, err := l.TryAcquire(ctx, "userpool", &dlock.AcquireOptions{TTL: 7 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var idle string
	if err := p.QueryRow(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&idle); err != nil {
		t.Fatal(err)
	}
	if idle != "0" {
		t.Fatalf("the user's session has idle_in_transaction_session_timeout %s after dlock's leases, want its own 0", idle)
	}
}
