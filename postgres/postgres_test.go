package postgres_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/sqllock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/postgres"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func TestBasic(t *testing.T) {
	sqltest.EachStrategy(t, testenv.Postgres(t).URL, "advisory", sqltest.Basic)
}

func TestInspect(t *testing.T) {
	sqltest.EachStrategy(t, testenv.Postgres(t).URL, "advisory", sqltest.Inspect)
}

func TestConformance(t *testing.T) {
	// A 1s TTL: with 500ms, under -race, the first winner of 100
	// concurrent TryAcquires on fresh connections can expire (for real,
	// on the server) before the last of them has connected.
	backendtest.EachStrategy(t, backendtest.Lookup("postgres"), conformance.WithTTL(time.Second))
}

func TestPoolLeak(t *testing.T) {
	srv := testenv.Postgres(t)
	sqltest.PoolLeaks(t, "advisory", func(t *testing.T, s string, size int) (*dlock.Locker, func() int, func() int) {
		pc, err := pgxpool.ParseConfig(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		pc.MaxConns = int32(size)
		p, err := pgxpool.NewWithConfig(t.Context(), pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		l, err := postgres.OpenLocker(p, &postgres.Options{Strategy: s})
		if err != nil {
			t.Fatal(err)
		}
		return l, func() int { return int(p.Stat().AcquiredConns()) }, func() int { return int(p.Stat().TotalConns()) }
	})
}

func TestBadTables(t *testing.T) { sqltest.BadTables(t, testenv.Postgres(t).URL) }

func TestRedaction(t *testing.T) {
	srv := testenv.Postgres(t)
	const secret = "Wr0ng-s3cret-pw"
	sqltest.Redaction(t, strings.Replace(srv.URL, ":dlockpw@", ":"+secret+"@", 1), secret)
}

func TestNulName(t *testing.T) {
	srv := testenv.Postgres(t)
	l := sqltest.Open(t, t.Context(), srv.URL)
	if _, err := l.TryAcquire(t.Context(), "a\x00b", nil); !errors.Is(err, dlock.ErrInvalidName) {
		t.Fatalf("a name with NUL: %v, want ErrInvalidName", err)
	}
	long := strings.Repeat("é", 512) // 1024 bytes of UTF-8
	ls, err := l.TryAcquire(t.Context(), long, nil)
	if err != nil {
		t.Fatalf("a 1024-byte name: %v", err)
	}
	ls.Release(t.Context())
}

func TestPausedHolderFencedWrite(t *testing.T) {
	srv := testenv.Postgres(t)
	p, err := pgxpool.New(t.Context(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sqltest.PausedHolderEach(t, srv.URL, "advisory", time.Millisecond, func(ctx context.Context) error {
		_, err := p.Exec(ctx, `CREATE TABLE IF NOT EXISTS accounts (id int PRIMARY KEY, balance int NOT NULL, fence bigint NOT NULL DEFAULT 0);
			INSERT INTO accounts VALUES (1, 0, 0) ON CONFLICT (id) DO UPDATE SET fence = 0`)
		return err
	}, func(ctx context.Context, token uint64) (bool, error) {
		return postgres.FencedUpdate(ctx, p, "public.accounts", "fence", token, "balance = balance + $1", "id = $2", 1, 1)
	})
}

// TestOneConnPool: no strategy needs a second connection (forupdate's
// tokens are made safe by Recover, on the lease's own connection, not by
// a commit on another), so each opens and locks on pool_max_conns=1.
func TestOneConnPool(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, s := range []string{"forupdate", "advisory", "version"} {
		l, err := dlock.Open(ctx, sqltest.WithParams(srv.URL, "strategy", s, "pool_max_conns", "1", "table", "onepool_"+s))
		if err != nil {
			t.Fatalf("Open with strategy=%s and pool_max_conns=1: %v", s, err)
		}
		ls, err := l.TryAcquire(ctx, "one", nil)
		if err != nil {
			t.Fatalf("%s: TryAcquire on one connection: %v", s, err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("%s: Release: %v", s, err)
		}
		l.Close()
	}
}

// TestLeaseSafety: on every strategy the declared TTL range holds on the
// server (no overflow of a huge TTL; a TTL outside it is refused), a lease
// that ended for its holder frees the lock on the server at once, and
// cancelled Acquires leave no lease behind.
func TestLeaseSafety(t *testing.T) {
	sqltest.Safety(t, testenv.Postgres(t).URL, "advisory")
}

// TestSharedTable: every pair of strategies on one table, and the
// spellings of one table (unqualified, schema-qualified, upper case),
// exclude each other.
func TestSharedTable(t *testing.T) {
	srv := testenv.Postgres(t)
	sqltest.SharedTable(t, srv.URL, sqltest.Strategies("advisory"), func(table string) []string {
		return []string{table, "public." + table, strings.ToUpper(table)}
	})
}

// TestRecreatedCounter: dropping and re-creating the lock table and its
// sequence does not restart tokens.
func TestRecreatedCounter(t *testing.T) {
	srv := testenv.Postgres(t)
	p, err := pgxpool.New(t.Context(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sqltest.EachStrategy(t, srv.URL, "advisory", func(t *testing.T, rawURL string) {
		sqltest.RecreatedCounter(t, rawURL, func(ctx context.Context, table string) error {
			_, err := p.Exec(ctx, "DROP TABLE "+table+"; DROP SEQUENCE "+table+"_fence")
			return err
		})
	})
}

// TestVersionMiss: a version TryAcquire that takes nothing says how long
// the holder still holds, and a row deleted by hand is made again.
func TestVersionMiss(t *testing.T) {
	srv := testenv.Postgres(t)
	p, err := pgxpool.New(t.Context(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sqltest.VersionMiss(t, srv.URL, true, func(ctx context.Context, table, name string) error {
		_, err := p.Exec(ctx, "DELETE FROM "+table+" WHERE name = $1", name)
		return err
	})
}

func TestSemaphores(t *testing.T) {
	sqltest.Semaphores(t, testenv.Postgres(t).URL, "advisory")
}

// TestSemaphoreAdvisoryKeys: an advisory permit's session holds two
// advisory locks of the two-int4 form (pg_locks.objsubid 2), a key space
// apart from the locks' bigint keys (objsubid 1): the header's key shared
// and its slot's exclusively; its release frees both.
func TestSemaphoreAdvisoryKeys(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx := t.Context()
	l := sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", "advisory"))
	s, err := l.Semaphore("keys", 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := sqltest.Core(l).Sessions()[0]
	count := func() (modes string) {
		t.Helper()
		found, err := sqltest.Exec(ctx, l, []sqllock.Stmt{sqllock.S("SELECT coalesce(string_agg(objsubid || ' ' || mode, ', ' ORDER BY mode), '') FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted", pid)}, &modes)
		if err != nil || !found {
			t.Fatalf("pg_locks: %v, %v", found, err)
		}
		return modes
	}
	if got, want := count(), "2 ExclusiveLock, 2 ShareLock"; got != want {
		t.Fatalf("the permit's session holds %q, want %q", got, want)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != "" {
		t.Fatalf("after the release the session holds %q, want nothing", got)
	}
}
