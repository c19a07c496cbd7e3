package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock/internal/stats"
	"github.com/dlock-go/dlock/internal/testenv"
)

// BenchmarkNotifyListeners measures what bounds the version strategy's
// handoff: its release hands the lease over and NOTIFYs the next waiter's
// Locker in one statement, and PostgreSQL (15, as up to 18) signals at
// commit every backend that LISTENs in the database, on any channel, each
// of which wakes and reads the notification queue. So a NOTIFY costs more
// with every Locker that listens (one listening connection per Locker),
// whoever it is for. With 0, 1, 8 and 32 other connections listening, each
// on a channel of its own, it times, alternating per operation, a
// one-row UPDATE (autocommit, as the release) and the same
// UPDATE that also NOTIFYs a channel nobody listens on, and reports their
// p50s (µs). Run with e.g.
//
//	go test -run '^$' -bench NotifyListeners -benchtime 400x ./postgres
func BenchmarkNotifyListeners(b *testing.B) {
	srv := testenv.Postgres(b)
	ctx := testenv.Context(b, 10*time.Minute)
	c, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	table := fmt.Sprintf("dlock_bench_notify_%d", time.Now().UnixNano())
	for _, q := range []string{
		"CREATE TABLE " + table + " (id int PRIMARY KEY, v bigint)",
		"INSERT INTO " + table + " VALUES (1, 0)",
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { c.Exec(context.Background(), "DROP TABLE "+table) })
	update := "UPDATE " + table + " SET v = v + 1 WHERE id = 1"
	notify := "WITH u AS (" + update + " RETURNING v) SELECT pg_notify('dlock_bench_nobody', v::text) FROM u"
	var listeners []*pgx.Conn
	defer func() {
		for _, l := range listeners {
			l.Close(context.Background())
		}
	}()
	for _, n := range []int{0, 1, 8, 32} {
		for len(listeners) < n {
			l, err := pgx.Connect(ctx, srv.DSN)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.Exec(ctx, fmt.Sprintf("LISTEN dlock_bench_l%d", len(listeners))); err != nil {
				b.Fatal(err)
			}
			listeners = append(listeners, l)
		}
		b.Run(fmt.Sprintf("listeners=%d", n), func(b *testing.B) {
			var plain, notified []time.Duration
			for i := range 2 * b.N {
				q := update
				if i%2 == 1 {
					q = notify
				}
				t0 := time.Now()
				if _, err := c.Exec(ctx, q); err != nil {
					b.Fatal(err)
				}
				d := time.Since(t0)
				if i%2 == 1 {
					notified = append(notified, d)
				} else {
					plain = append(plain, d)
				}
				// A pause, as between a lock's releases, so that the
				// listeners' wake-ups are not queued behind each other.
				time.Sleep(500 * time.Microsecond)
			}
			p50 := func(xs []time.Duration) float64 {
				slices.Sort(xs)
				return stats.Micros(xs[len(xs)/2])
			}
			b.ReportMetric(p50(plain), "update-µs")
			b.ReportMetric(p50(notified), "update+notify-µs")
		})
	}
}
