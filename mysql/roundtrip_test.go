package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/mysql"
)

// countedDB opens a pool of 2 connections to srv whose round trips
// countedNet.f counts (any round trip on a second connection is counted
// too).
func countedDB(t *testing.T, srv *testenv.Server) *sql.DB {
	countedNet.once.Do(func() {
		gomysql.RegisterDialContext("dlockcounted", func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return countedNet.f.Wrap(c), nil
		})
	})
	cfg, err := gomysql.ParseDSN(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Net = "dlockcounted"
	cfg.InterpolateParams, cfg.MultiStatements, cfg.ParseTime = true, true, true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	return db
}

// TestWaitRoundTrips: a blocking Acquire of a held GET_LOCK waits on the
// Locker's kept session, and its grant shares it
// (sqltest.WaitRoundTrips).
func TestWaitRoundTrips(t *testing.T) {
	srv := testenv.MySQL(t)
	l, err := mysql.OpenLocker(countedDB(t, srv), &mysql.Options{Strategy: "getlock", MultiStatements: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other := sqltest.Open(t, t.Context(), sqltest.WithParams(srv.URL, "strategy", "getlock"))
	sqltest.WaitRoundTrips(t, l, other, countedNet.f)
}

var countedNet = struct {
	once sync.Once
	f    *sqltest.Flights
}{f: &sqltest.Flights{}}

// TestRoundTrips: an uncontended TryAcquire and Release of a pinned
// strategy cost one round trip each (one multi-statement each way),
// after the first use of a connection (which learns its session); so do
// a semaphore's permit's on every strategy.
func TestRoundTrips(t *testing.T) {
	srv := testenv.MySQL(t)
	db := countedDB(t, srv)
	stats := openDB(t, srv.DSN)
	// DLOCK_TEST_COST=1 also reports the server's statements and redo log
	// syncs per cycle.
	cost := os.Getenv("DLOCK_TEST_COST") != ""
	status := func(ctx context.Context) map[string]float64 {
		out := map[string]float64{}
		rows, err := stats.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Innodb_os_log_fsyncs', 'Innodb_log_writes', 'Com_commit', 'Com_rollback')")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var v float64
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		return out
	}
	// A /fresh run takes a new name each time: its row is created by the
	// acquire's own script (forupdate: before its transaction; version: by
	// its one statement), in the same round trip.
	for _, s := range []string{"forupdate", "forupdate/fresh", "getlock", "version", "version/fresh"} {
		t.Run(s, func(t *testing.T) {
			strategy, fresh := strings.CutSuffix(s, "/fresh")
			l, err := mysql.OpenLocker(db, &mysql.Options{Strategy: strategy, MultiStatements: true})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cycle := sqltest.Cycle(t, ctx, l, "rt")
			if fresh {
				i := 0
				cycle = func() {
					i++
					sqltest.Cycle(t, ctx, l, fmt.Sprintf("rt-fresh-%d", i))()
				}
			}
			for range 3 {
				cycle() // create the row, learn the sessions
			}
			const n = 200
			s0 := status(ctx)
			r0, _ := countedNet.f.Count()
			start := time.Now()
			for range n {
				cycle()
			}
			took := time.Since(start)
			r1, _ := countedNet.f.Count()
			rt := float64(r1-r0) / n
			s1 := status(ctx)
			t.Logf("%s: per TryAcquire+Release: %.2f round trips, %v", s, rt, took/n)
			// Questions counts the status query itself once.
			stmts := (s1["Questions"] - s0["Questions"] - 1) / n
			if cost {
				t.Logf("%s: per TryAcquire+Release: %.2f statements, %.2f COMMIT, %.2f ROLLBACK, %.3f redo log writes, %.3f redo log fsyncs", s,
					stmts, (s1["Com_commit"]-s0["Com_commit"])/n, (s1["Com_rollback"]-s0["Com_rollback"])/n,
					(s1["Innodb_log_writes"]-s0["Innodb_log_writes"])/n, (s1["Innodb_os_log_fsyncs"]-s0["Innodb_os_log_fsyncs"])/n)
			}
			if rt > 2 {
				t.Errorf("%s: %.2f round trips per TryAcquire+Release, want 2", s, rt)
			}
			// A blocking Acquire of a free lock (forupdate, on a pool of
			// the user's: the session's timeouts set and put back, START
			// TRANSACTION, the grant, ROLLBACK; getlock, on a session set
			// up already: the grant, RELEASE_LOCK). The grant is one
			// statement (forupdate: row lock, token and holder; getlock:
			// GET_LOCK and the token's write), as a waiter's: woken by a
			// release, it runs nothing after the wait, where each
			// statement cost a handoff 60-160 µs.
			want := map[string]float64{"forupdate": 5, "getlock": 2}[s]
			if want == 0 {
				return
			}
			s0 = status(ctx)
			for range n {
				ls, err := l.Acquire(ctx, "rt", &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true})
				if err != nil {
					t.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			s1 = status(ctx)
			if stmts := (s1["Questions"] - s0["Questions"] - 1) / n; stmts > want+0.05 {
				t.Errorf("%s: %.2f statements per Acquire+Release, want %v (the grant in one statement)", s, stmts, want)
			}
		})
	}
	// A permit costs what a lock costs, on every strategy.
	for _, s := range sqltest.Strategies("getlock") {
		t.Run("semaphore/"+s, func(t *testing.T) {
			l, err := mysql.OpenLocker(db, &mysql.Options{Strategy: s, MultiStatements: true})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			sqltest.SemRoundTrips(t, l, countedNet.f)
		})
	}
}

// TestSessionSettingsOnce: on a pool the driver owns, a forupdate lease
// sets the session's timeouts only when the connection does not have
// them yet, and its release leaves them for the next lease: once warm,
// an uncontended TryAcquire+Release is 5 statements, none of which sets
// a session's timeout (the server's general log shows every script).
func TestSessionSettingsOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // the server may run as another user
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "general.log")
	srv := testenv.NewMySQL(t, &testenv.MySQLOptions{Args: []string{"--general-log=1", "--log-output=FILE", "--general-log-file=" + logFile}})
	stats := openDB(t, srv.DSN)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := dlock.Open(ctx, sqltest.WithParams(srv.URL, "strategy", "forupdate"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	count := func() (statements, settings float64) {
		var k string
		if err := stats.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&k, &statements); err != nil {
			t.Fatal(err)
		}
		log, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		return statements, float64(strings.Count(string(log), "SESSION wait_timeout = "))
	}
	cycle := sqltest.Cycle(t, ctx, l, "once")
	for range 3 {
		cycle()
	}
	const n = 50
	q0, s0 := count()
	for range n {
		cycle()
	}
	q1, s1 := count()
	per := (q1 - q0 - 1) / n // count's own SHOW STATUS
	t.Logf("forupdate on an owned pool: %.2f statements per TryAcquire+Release, %.0f scripts that set a session timeout in %d", per, s1-s0, n)
	if per > 5 || s1 != s0 {
		t.Errorf("%.2f statements per TryAcquire+Release and %.0f scripts setting a session timeout in %d, want 5 and 0 (the timeouts set once per connection)", per, s1-s0, n)
	}
}

// TestVersionRefusalWithFoundRows: a version attempt on a held name (one
// INSERT … ON DUPLICATE KEY UPDATE whose every assignment is conditional)
// is refused and changes nothing, its token is the holder's, and the next
// grant's is larger; on a pool whose DSN has clientFoundRows=true, under
// which a server may count a matched but unchanged row as affected: the
// grant is read from the statement's LAST_INSERT_ID, not its row count.
func TestVersionRefusalWithFoundRows(t *testing.T) {
	srv := testenv.MySQL(t)
	db, err := sql.Open("mysql", srv.DSN+"?interpolateParams=true&multiStatements=true&parseTime=true&clientFoundRows=true")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := mysql.OpenLocker(db, &mysql.Options{Strategy: "version", Table: "found_rows_locks"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.TryAcquire(ctx, "found", &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	read := func() (fence int64, owner string) {
		if err := db.QueryRowContext(ctx, "SELECT fence, owner FROM found_rows_locks WHERE name = 'found'").Scan(&fence, &owner); err != nil {
			t.Fatal(err)
		}
		return fence, owner
	}
	f0, o0 := read()
	for range 3 {
		ls, err := l.TryAcquire(ctx, "found", &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true, Owner: "intruder"})
		if err == nil {
			ls.Release(ctx)
			t.Fatalf("a held name was granted again (token %d, holder's %d)", ls.Token(), held.Token())
		}
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
	}
	if f1, o1 := read(); f1 != f0 || o1 != o0 || uint64(f1) != held.Token() {
		t.Errorf("refused attempts changed the row: fence %d owner %q, was %d %q (holder's token %d)", f1, o1, f0, o0, held.Token())
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := l.TryAcquire(ctx, "found", &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= held.Token() {
		t.Errorf("token %d after %d: not increasing", next.Token(), held.Token())
	}
}

// TestVersionRowDeleted: a version Locker takes a name it has found a
// row for with a plain UPDATE; when the row has been deleted since, the
// UPDATE finds nothing and the same Acquire creates it again (and is
// granted, with a larger token), rather than reading the missing row as
// held.
func TestVersionRowDeleted(t *testing.T) {
	ctx, db, u := tableTest(t, "version", "deleted_rows")
	l := sqltest.Open(t, ctx, u)
	opts := &dlock.AcquireOptions{NoKeepAlive: true}
	var last uint64
	for i := range 3 {
		ls, err := l.TryAcquire(ctx, "d", opts)
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		if ls.Token() <= last {
			t.Errorf("attempt %d: token %d after %d", i, ls.Token(), last)
		}
		last = ls.Token()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "DELETE FROM deleted_rows WHERE name = 'd'"); err != nil {
			t.Fatal(err)
		}
	}
}
