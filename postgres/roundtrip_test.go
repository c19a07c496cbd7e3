package postgres_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/postgres"
)

// countedLocker opens a Locker of strategy on a pool whose round trips f
// counts.
func countedLocker(t *testing.T, strategy string) (*dlock.Locker, *sqltest.Flights) {
	srv := testenv.Postgres(t)
	pc, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	f := &sqltest.Flights{}
	dial := pc.ConnConfig.DialFunc
	pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return f.Wrap(c), nil
	}
	pc.MaxConns = 2 // any round trip on a second connection is counted too
	p, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	l, err := postgres.OpenLocker(p, &postgres.Options{Strategy: strategy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, f
}

// TestRoundTrips: an uncontended TryAcquire and Release cost one round
// trip each (the lock and its token in one statement or batch; the
// release in one: on version, the plain release, with nobody queued),
// after the first use of the connection (which prepares the statements).
// A /fresh run takes a new name each time: forupdate's lock batch creates
// its row first, in the same round trip; version's one statement creates
// it anyway.
func TestRoundTrips(t *testing.T) {
	for _, s := range append(sqltest.Strategies("advisory"), "forupdate/fresh", "version/fresh") {
		t.Run(s, func(t *testing.T) {
			strategy, fresh := strings.CutSuffix(s, "/fresh")
			l, f := countedLocker(t, strategy)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			sc := rawConn(t, ctx)
			cycle := sqltest.Cycle(t, ctx, l, "rt")
			if fresh {
				i := 0
				cycle = func() {
					i++
					sqltest.Cycle(t, ctx, l, fmt.Sprintf("rt-fresh-%d", i))()
				}
			}
			for range 3 {
				cycle() // create the row, recover, prepare
			}
			// version's listener, started in the background at first use
			if err := sqltest.Core(l).Listen(ctx); err != nil {
				t.Fatal(err)
			}
			const n = 200
			// DLOCK_TEST_COST=1 also reports the server's WAL syncs and
			// transactions, which backends report when idle for 10s.
			cost := os.Getenv("DLOCK_TEST_COST") != ""
			serverStats := func() (lsn, syncs, commits, rollbacks float64) {
				if cost {
					time.Sleep(11 * time.Second)
				}
				var l, sy, c, r int64
				if err := sc.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0', (SELECT wal_sync FROM pg_stat_wal), xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&l, &sy, &c, &r); err != nil {
					t.Fatal(err)
				}
				return float64(l), float64(sy), float64(c), float64(r)
			}
			lsn0, sync0, c0, rb0 := serverStats()
			cycle() // after an idle second pgxpool pings a connection before it hands it out
			r0, w0 := f.Count()
			start := time.Now()
			for range n {
				cycle()
			}
			took := time.Since(start)
			r1, w1 := f.Count()
			lsn1, sync1, c1, rb1 := serverStats()
			rt, w := float64(r1-r0)/n, float64(w1-w0)/n
			t.Logf("%s: per TryAcquire+Release: %.2f round trips, %.2f writes, %.0f WAL bytes, %v", s, rt, w, (lsn1-lsn0)/n, took/n)
			if cost {
				t.Logf("%s: per TryAcquire+Release: %.3f WAL syncs, %.2f commits, %.2f rollbacks", s, (sync1-sync0)/n, (c1-c0)/n, (rb1-rb0)/n)
			}
			if rt > 2 {
				t.Errorf("%s: %.2f round trips per TryAcquire+Release, want 2", s, rt)
			}
		})
	}
}

// TestSemaphoreRoundTrips: a permit costs what a lock costs, on every
// strategy (sqltest.SemRoundTrips).
func TestSemaphoreRoundTrips(t *testing.T) {
	for _, s := range sqltest.Strategies("advisory") {
		t.Run(s, func(t *testing.T) {
			l, f := countedLocker(t, s)
			// version's listener, started in the background at first use:
			// its connection's round trips must not land in the count.
			if err := sqltest.Core(l).Listen(t.Context()); err != nil {
				t.Fatal(err)
			}
			sqltest.SemRoundTrips(t, l, f)
		})
	}
}

// TestWaitRoundTrips: a blocking Acquire of a held advisory lock waits on
// the Locker's kept session, and its grant shares it
// (sqltest.WaitRoundTrips).
func TestWaitRoundTrips(t *testing.T) {
	l, f := countedLocker(t, "advisory")
	other := sqltest.Open(t, t.Context(), sqltest.WithParams(testenv.Postgres(t).URL, "strategy", "advisory"))
	sqltest.WaitRoundTrips(t, l, other, f)
}

// TestNoGoroutinePerGrant: an uncontended Acquire+Release starts no
// goroutine, on every strategy. A goroutine per grant (the portable
// layer's wait on a lease's Lost channel, when the lease cannot call back
// on its loss) costs two scheduler trips per lock use, which a loaded
// machine makes slow (dlockbench: advisory's uncontended use ×2 of the
// floor's beside other targets, ×1.1 alone).
func TestNoGoroutinePerGrant(t *testing.T) {
	for _, s := range sqltest.Strategies("advisory") {
		t.Run(s, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			l := sqltest.Open(t, ctx, sqltest.WithParams(testenv.Postgres(t).URL, "strategy", s))
			use := func() {
				ls, err := l.Acquire(ctx, "gor", nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				use() // create the row, recover, prepare
			}
			if err := sqltest.Core(l).Listen(ctx); err != nil { // version's, started at first use
				t.Fatal(err)
			}
			created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
			metrics.Read(created)
			before := created[0].Value.Uint64()
			const n = 200
			for range n {
				use()
			}
			metrics.Read(created)
			// A few for the pool's and the runtime's own work meanwhile.
			if got := created[0].Value.Uint64() - before; got > n/10 {
				t.Errorf("%d goroutines started in %d uncontended Acquire+Release, want none per grant", got, n)
			}
		})
	}
}
