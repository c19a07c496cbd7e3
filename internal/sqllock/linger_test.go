package sqllock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestListenerLingers: a PostgreSQL version Locker's listening connection
// (which every NOTIFY in the database wakes, whoever it is for) closes
// once none of its waiters has used it for the linger, and a wait after
// that opens another and is still handed the lock at its release.
func TestListenerLingers(t *testing.T) {
	const linger = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srv := testenv.Postgres(t)
	url := sqltest.WithParams(srv.URL, "strategy", "version")
	holder := sqltest.Open(t, ctx, url)
	waiter := sqltest.Open(t, ctx, url)
	core := sqltest.Core(waiter)
	core.SetListenerLinger(linger)
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// listening counts the backends whose last statement is the waiter's
	// LISTEN of its grant channel: its listener.
	listening := func() int {
		t.Helper()
		var n int
		q := `SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN ' || $1`
		if err := conn.QueryRow(ctx, q, pgx.Identifier{core.GrantChannel()}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(want int, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for listening() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d listeners after %v, want %d", listening(), within, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// wait has the waiter wait for a held lock, which the holder releases
	// after 200ms: the release hands it over through the listener.
	wait := func(name string) {
		t.Helper()
		held, err := holder.TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(200 * time.Millisecond)
			_ = held.Release(context.Background())
		}()
		start := time.Now()
		ls, err := waiter.Acquire(ctx, name, &dlock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the wait took %v after a release at 200ms", d)
		}
		if err := ls.Release(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatal(err)
		}
	}
	wait("linger-a")
	if n := listening(); n != 1 {
		t.Fatalf("%d listeners right after a wait, want 1", n)
	}
	waitFor(0, linger+5*time.Second)
	// Idle, it stays closed; a new wait opens it again.
	time.Sleep(2 * linger)
	if n := listening(); n != 0 {
		t.Fatalf("%d listeners while idle, want 0", n)
	}
	wait("linger-b")
	waitFor(1, 5*time.Second)
	waitFor(0, linger+5*time.Second)
}
