package postgres_test

import (
	"context"
	"errors"
	"fmt"
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
