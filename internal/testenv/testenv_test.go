package testenv

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock/driver"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// closeAndCheck closes s and fails t unless every process of it (the
// server, its process group, its children) is gone, and its directory too.
func closeAndCheck(t *testing.T, s *Server) {
	t.Helper()
	pid := s.Pid()
	if pid == 0 {
		t.Fatal("pid 0 before Close")
	}
	tree := processTree(pid)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range tree {
		if !processGone(p) {
			t.Errorf("pid %d (of server %d) still exists after Close", p, pid)
		}
	}
	if !reapTree(pid, nil, 0) {
		t.Errorf("process group %d still has processes after Close", pid)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("dir %s left after Close: %v", s.Dir, err)
	}
}

func redisSetGet(t *testing.T, ctx context.Context, addr, key, val string) {
	t.Helper()
	if _, err := RedisDo(ctx, addr, "SET", key, val); err != nil {
		t.Fatal(err)
	}
	got, err := RedisDo(ctx, addr, "GET", key)
	if err != nil || got != val {
		t.Fatalf("GET %s = %v, %v; want %q", key, got, err, val)
	}
}

func TestRedis(t *testing.T) {
	Require(t, KindRedis)
	ctx := testCtx(t)
	s, err := StartRedis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("redis started in %v (%s, version %s)", s.StartupTime.Round(time.Millisecond), driver.Redact(s.URL), s.Version)
	if v, err := RedisDo(ctx, s.Addr, "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING = %v, %v", v, err)
	}
	if !strings.HasPrefix(s.URL, "redis://127.0.0.1:") || !strings.HasSuffix(s.URL, "/0") {
		t.Errorf("URL = %q", s.URL)
	}
	closeAndCheck(t, s)
}

func TestRedisPersistenceKillStart(t *testing.T) {
	s := NewRedis(t, &RedisOptions{Persistence: true, Config: []string{"maxmemory-policy noeviction"}})
	ctx := testCtx(t)
	redisSetGet(t, ctx, s.Addr, "k", "v1")
	addr, pid := s.Addr, s.Pid()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		t.Fatalf("pid %d alive after Kill", pid)
	}
	if _, err := RedisDo(ctx, addr, "PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	t0 := time.Now()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("redis restarted in %v", time.Since(t0).Round(time.Millisecond))
	if s.Addr != addr {
		t.Fatalf("restarted on %s, was %s", s.Addr, addr)
	}
	if got, err := RedisDo(ctx, s.Addr, "GET", "k"); err != nil || got != "v1" {
		t.Fatalf("after Kill+Start GET k = %v, %v; want v1", got, err)
	}
	if s.Settings["appendonly"] != "yes" || s.Settings["maxmemory-policy"] != "noeviction" {
		t.Errorf("Settings = %v", s.Settings)
	}
}

func TestRedisPauseResume(t *testing.T) {
	s := NewRedis(t, nil)
	ctx := testCtx(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := RedisDo(pctx, s.Addr, "PING")
	cancel()
	if err == nil {
		t.Fatal("a paused server answered PING")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := RedisDo(ctx, s.Addr, "PING"); err != nil {
		t.Fatal(err)
	}
	// Stop keeps the directory; Start brings the server back on its port.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := RedisDo(ctx, s.Addr, "PING"); err != nil {
		t.Fatal(err)
	}
}

func TestRedisShared(t *testing.T) {
	a, b := Redis(t), Redis(t)
	if a != b {
		t.Fatal("Redis returned two servers")
	}
	if !a.External() {
		if err := a.Kill(); err != ErrShared {
			t.Fatalf("Kill of the shared server = %v, want ErrShared", err)
		}
	}
	redisSetGet(t, testCtx(t), a.Addr, "testenv/TestRedisShared", "x")
}

func TestRedisNodes(t *testing.T) {
	Require(t, KindRedis)
	ctx := testCtx(t)
	t0 := time.Now()
	nodes := RedisNodes(t, 3)
	t.Logf("redis 3 nodes started in %v", time.Since(t0).Round(time.Millisecond))
	seen := map[string]bool{}
	for _, s := range nodes {
		if seen[s.Addr] {
			t.Fatalf("two nodes on %s", s.Addr)
		}
		seen[s.Addr] = true
		if _, err := RedisDo(ctx, s.Addr, "PING"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	Require(t, KindRedis)
	ctx := testCtx(t)
	c := NewRedisCluster(t, 3)
	t.Logf("redis cluster (3 masters) started in %v (%s)", c.StartupTime.Round(time.Millisecond), driver.Redact(c.URL))
	if !strings.HasPrefix(c.URL, "redis+cluster://127.0.0.1:") || strings.Count(c.URL, ",") != 2 {
		t.Errorf("URL = %q", c.URL)
	}
	// A key lives on exactly one node: the others redirect with MOVED.
	var owners int
	for _, s := range c.Nodes {
		_, err := RedisDo(ctx, s.Addr, "SET", "{k}", "v")
		if err == nil {
			owners++
		} else if !strings.Contains(err.Error(), "MOVED") {
			t.Fatal(err)
		}
	}
	if owners != 1 {
		t.Fatalf("%d nodes accepted the key, want 1", owners)
	}
	// A killed node comes back with its nodes.conf and the cluster heals.
	if err := c.Nodes[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitOK(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Nodes {
		closeAndCheck(t, s)
	}
}

func TestZooKeeper(t *testing.T) {
	Require(t, KindZooKeeper)
	ctx := testCtx(t)
	s, err := StartZooKeeper(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("zookeeper started in %v (%s, version %s)", s.StartupTime.Round(time.Millisecond), driver.Redact(s.URL), s.Version)
	if out, err := ZKCommand(ctx, s.Addr, "ruok"); err != nil || out != "imok" {
		t.Fatalf("ruok = %q, %v", out, err)
	}
	if m, err := zkMode(ctx, s.Addr); err != nil || m != "standalone" {
		t.Fatalf("mode = %q, %v", m, err)
	}
	if s.Settings["forceSync"] != "no" {
		t.Errorf("Settings = %v", s.Settings)
	}
	closeAndCheck(t, s)
}

func TestZooKeeperEnsemble(t *testing.T) {
	Require(t, KindZooKeeper)
	ctx := testCtx(t)
	e := ZooKeeperEnsemble(t, 3)
	t.Logf("zookeeper 3-ensemble started in %v (%s)", e.StartupTime.Round(time.Millisecond), driver.Redact(e.URL))
	leader, err := e.Leader()
	if err != nil {
		t.Fatal(err)
	}
	// Killing the leader leaves a quorum that elects a new one; the old
	// leader rejoins as a follower.
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitServing(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(); err != nil {
		t.Fatal(err)
	}
}

func pgQuery(t *testing.T, ctx context.Context, dsn, q string, args ...any) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var out string
	if err := conn.QueryRow(ctx, q, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPostgres(t *testing.T) {
	Require(t, KindPostgres)
	ctx := testCtx(t)
	s, err := StartPostgres(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("postgres started in %v (%s, version %s)", s.StartupTime.Round(time.Millisecond), driver.Redact(s.URL), s.Version)
	if got := pgQuery(t, ctx, s.DSN, "SELECT 1::text"); got != "1" {
		t.Fatalf("SELECT 1 = %q", got)
	}
	if got := pgQuery(t, ctx, s.DSN, "SHOW fsync"); got != "off" {
		t.Errorf("fsync = %s", got)
	}
	// A connection open at Close: its backend (which leaves the process
	// group) must go too.
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	closeAndCheck(t, s)
}

func TestPostgresKillStart(t *testing.T) {
	s := NewPostgres(t, &PGOptions{Durable: true})
	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')"); err != nil {
		t.Fatal(err)
	}
	// dlock may terminate its own other backends.
	other, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1)", other.PgConn().PID()).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend = %v, %v", ok, err)
	}
	other.Close(context.Background())
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pgQuery(t, ctx, s.DSN, "SELECT v FROM t"); got != "kept" {
		t.Fatalf("after Kill+Start: %q", got)
	}
	if got := pgQuery(t, ctx, s.DSN, "SHOW fsync"); got != "on" {
		t.Errorf("Durable: fsync = %s", got)
	}
	// A graceful Stop (fast shutdown) and Start keep the data too.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pgQuery(t, ctx, s.DSN, "SELECT v FROM t"); got != "kept" {
		t.Fatalf("after Stop+Start: %q", got)
	}
}

func TestMySQL(t *testing.T) {
	Require(t, KindMySQL)
	ctx := testCtx(t)
	s, err := StartMySQL(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mysql started in %v (%s, version %s)", s.StartupTime.Round(time.Millisecond), driver.Redact(s.URL), s.Version)
	db, err := openMySQL(s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	var flush string
	if err := db.QueryRowContext(ctx, "SELECT @@innodb_flush_log_at_trx_commit").Scan(&flush); err != nil || flush != "2" {
		t.Errorf("innodb_flush_log_at_trx_commit = %s, %v", flush, err)
	}
	db.Close()
	closeAndCheck(t, s)
}

func TestMySQLKillStart(t *testing.T) {
	s := NewMySQL(t, nil)
	ctx := testCtx(t)
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (v VARCHAR(10))"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES ('kept')"); err != nil {
		t.Fatal(err)
	}
	// dlock may KILL another of its connections.
	c1, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := c1.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "KILL ?", id); err != nil {
		t.Fatalf("KILL: %v", err)
	}
	c1.Close()
	db.Close()
	// InnoDB with innodb_flush_log_at_trx_commit=2 writes the log at
	// commit: a killed server process (not machine) keeps the row.
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	db2, err := openMySQL(s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	var v string
	if err := db2.QueryRowContext(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != "kept" {
		t.Fatalf("after Kill+Start: %q, %v", v, err)
	}
}

func TestExternal(t *testing.T) {
	s, err := External(KindMySQL, "mysql://u:p@127.0.0.1:3307/db?tls=false")
	if err != nil {
		t.Fatal(err)
	}
	if s.DSN != "u:p@tcp(127.0.0.1:3307)/db?tls=false" || !s.External() || s.Pid() != 0 {
		t.Errorf("DSN = %q", s.DSN)
	}
	if err := s.Kill(); err != ErrExternal {
		t.Errorf("Kill = %v, want ErrExternal", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if _, err := External(KindZooKeeper, "zk://127.0.0.1:1,127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}
}
