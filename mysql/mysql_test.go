package mysql_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/mysql"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func TestBasic(t *testing.T) { sqltest.EachStrategy(t, testenv.MySQL(t).URL, "getlock", sqltest.Basic) }

func TestInspect(t *testing.T) {
	sqltest.EachStrategy(t, testenv.MySQL(t).URL, "getlock", sqltest.Inspect)
}

func TestConformance(t *testing.T) {
	backendtest.EachStrategy(t, backendtest.Lookup("mysql"), conformance.WithTTL(time.Second))
}

func openDB(t *testing.T, dsn string) *sql.DB {
	db, err := sql.Open("mysql", dsn+"?interpolateParams=true&multiStatements=true&parseTime=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestPoolLeak(t *testing.T) {
	srv := testenv.MySQL(t)
	sqltest.PoolLeaks(t, "getlock", func(t *testing.T, s string, size int) (*dlock.Locker, func() int, func() int) {
		db := openDB(t, srv.DSN)
		db.SetMaxOpenConns(size)
		db.SetMaxIdleConns(size)
		l, err := mysql.OpenLocker(db, &mysql.Options{Strategy: s, MultiStatements: true})
		if err != nil {
			t.Fatal(err)
		}
		return l, func() int { return db.Stats().InUse }, func() int { return db.Stats().OpenConnections }
	})
}

func TestBadTables(t *testing.T) { sqltest.BadTables(t, testenv.MySQL(t).URL) }

func TestRedaction(t *testing.T) {
	srv := testenv.MySQL(t)
	const secret = "Wr0ng-s3cret-pw"
	bad := strings.Replace(srv.URL, ":dlockpw@", ":"+secret+"@", 1)
	sqltest.Redaction(t, bad, secret)
	// The go-sql-driver form of the URL too.
	sqltest.Redaction(t, strings.Replace(bad, "@"+srv.Addr, "@tcp("+srv.Addr+")", 1), secret)
}

func TestPausedHolderFencedWrite(t *testing.T) {
	srv := testenv.MySQL(t)
	db := openDB(t, srv.DSN)
	// wait_timeout counts whole seconds.
	sqltest.PausedHolderEach(t, srv.URL, "getlock", time.Second, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS accounts (id INT PRIMARY KEY, balance INT NOT NULL, fence BIGINT NOT NULL DEFAULT 0);
			INSERT INTO accounts VALUES (1, 0, 0) ON DUPLICATE KEY UPDATE fence = 0`)
		return err
	}, func(ctx context.Context, token uint64) (bool, error) {
		return mysql.FencedUpdate(ctx, db, "accounts", "fence", token, "balance = balance + ?", "id = ?", 1, 1)
	})
}

func TestLongNames(t *testing.T) {
	srv := testenv.MySQL(t)
	for _, s := range sqltest.Strategies("getlock") {
		// A table of its own: the first attempt at a new name inserts its
		// row, and an InnoDB gap lock that an earlier test's session still
		// holds around it would make that TryAcquire busy (see the package
		// doc); this test is about long names.
		l := sqltest.Open(t, t.Context(), sqltest.WithParams(srv.URL, "strategy", s, "table", "long_names_"+s))
		long := strings.Repeat("é", 507) // 1014 bytes + the prefix, over GET_LOCK's 64 characters
		for _, name := range []string{long, long[:1012] + "x", "a\x00b", "dlock#abc"} {
			ls, err := l.TryAcquire(t.Context(), name, nil)
			if err != nil {
				t.Fatalf("%s: %q: %v", s, name[:8], err)
			}
			defer ls.Release(t.Context())
		}
	}
}

// TestOneConnPool: forupdate needs no second connection (its tokens are
// made safe by Recover, on the lease's own connection, not by a commit on
// another), so it locks on a pool limited to one connection.
func TestOneConnPool(t *testing.T) {
	srv := testenv.MySQL(t)
	db := openDB(t, srv.DSN)
	db.SetMaxOpenConns(1)
	l, err := mysql.OpenLocker(db, &mysql.Options{Strategy: "forupdate", MultiStatements: true, Table: "onepool"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range 2 {
		ls, err := l.TryAcquire(ctx, "one-conn", nil)
		if err != nil {
			t.Fatalf("TryAcquire with forupdate on a one-connection pool: %v", err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeaseSafety: on every strategy the declared TTL range holds on the
// server (no overflow of a huge TTL; a TTL outside it is refused), a lease
// that ended for its holder frees the lock on the server at once, and
// cancelled Acquires leave no lease behind.
func TestLeaseSafety(t *testing.T) {
	sqltest.Safety(t, testenv.MySQL(t).URL, "getlock")
}

// TestSharedTable: every pair of strategies on one table, and two
// spellings of one table, exclude each other.
func TestSharedTable(t *testing.T) {
	srv := testenv.MySQL(t)
	cfg, err := gomysql.ParseDSN(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	sqltest.SharedTable(t, srv.URL, sqltest.Strategies("getlock"), func(table string) []string {
		return []string{table, cfg.DBName + "." + table}
	})
}

// TestRecreatedCounter: dropping and re-creating the lock table and its
// counter does not restart tokens.
func TestRecreatedCounter(t *testing.T) {
	srv := testenv.MySQL(t)
	db := openDB(t, srv.DSN)
	sqltest.EachStrategy(t, srv.URL, "getlock", func(t *testing.T, rawURL string) {
		sqltest.RecreatedCounter(t, rawURL, func(ctx context.Context, table string) error {
			_, err := db.ExecContext(ctx, "DROP TABLE "+table+", "+table+"_fence")
			return err
		})
	})
}

// TestVersionMiss: a version TryAcquire that takes nothing fails (MySQL's
// does not read the holder's remaining time), and a row deleted by hand
// is made again.
func TestVersionMiss(t *testing.T) {
	srv := testenv.MySQL(t)
	db := openDB(t, srv.DSN)
	sqltest.VersionMiss(t, srv.URL, false, func(ctx context.Context, table, name string) error {
		_, err := db.ExecContext(ctx, "DELETE FROM "+table+" WHERE name = ?", name)
		return err
	})
}

func TestSemaphores(t *testing.T) {
	sqltest.Semaphores(t, testenv.MySQL(t).URL, "getlock")
}
