package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables naming external servers, used by the shared
// helpers instead of starting one.
const (
	EnvRedisURL      = "DLOCK_TEST_REDIS_URL"
	EnvRedisNodes    = "DLOCK_TEST_REDIS_NODES" // comma-separated redis:// URLs, for RedisNodes
	EnvZooKeeperURL  = "DLOCK_TEST_ZK_URL"
	EnvPostgresURL   = "DLOCK_TEST_POSTGRES_URL"
	EnvMySQLURL      = "DLOCK_TEST_MYSQL_URL"
	EnvEtcdURL       = "DLOCK_TEST_ETCD_URL"
	EnvRequire       = "DLOCK_REQUIRE_BACKENDS"
	EnvTestEnvDocker = "DLOCK_TESTENV"
)

// startTimeout bounds the start of a server by a test helper.
const startTimeout = 3 * time.Minute

// Require skips t (or, with DLOCK_REQUIRE_BACKENDS=1, fails it) unless the
// server of kind (KindRedis, KindZooKeeper, KindPostgres, KindMySQL) can be
// had: its binary is installed, an external server is named by its
// DLOCK_TEST_*_URL, or DLOCK_TESTENV=docker and the docker CLI is present.
func Require(t testing.TB, kind string) {
	t.Helper()
	if err := available(kind, true); err != nil {
		missing(t, err)
	}
}

// available reports why a server of kind cannot be had, or nil.
func available(kind string, externalOK bool) error {
	if externalOK && externalURL(kind) != "" {
		return nil
	}
	if dockerMode() {
		if _, err := exec.LookPath("docker"); err != nil {
			return &missingError{what: "docker (DLOCK_TESTENV=docker)"}
		}
		return nil
	}
	var err error
	switch kind {
	case KindRedis:
		_, err = redisServerPath()
	case KindZooKeeper:
		_, err = findZooKeeper()
	case KindPostgres:
		_, err = postgresBinDir()
	case KindMySQL:
		_, err = findMySQL()
	case KindEtcd:
		_, err = etcdPath()
	default:
		err = fmt.Errorf("testenv: unknown server kind %q", kind)
	}
	return err
}

// missing skips or fails t on a missing server binary.
func missing(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%v (%s=1: missing backends fail)", err, EnvRequire)
		return
	}
	t.Skipf("%v; or set %s=1 to fail instead of skipping", err, EnvRequire)
}

// fail reports a server that could not be had: skip/fail policy for a
// missing binary, t.Fatal for anything else.
func fail(t testing.TB, err error) {
	t.Helper()
	if IsMissing(err) || errors.Is(err, errDockerUnsupported) {
		missing(t, err)
	}
	t.Fatal(err)
}

func externalURL(kind string) string {
	switch kind {
	case KindRedis:
		return os.Getenv(EnvRedisURL)
	case KindZooKeeper:
		return os.Getenv(EnvZooKeeperURL)
	case KindPostgres:
		return os.Getenv(EnvPostgresURL)
	case KindMySQL:
		return os.Getenv(EnvMySQLURL)
	case KindEtcd:
		return os.Getenv(EnvEtcdURL)
	}
	return ""
}

// External returns a Server for an existing server at rawURL (a dlock URL
// of kind): URL as given, Addr its first host:port, DSN as the backend's Go
// client takes it.
func External(kind, rawURL string) (*Server, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("testenv: bad %s URL", kind) // no echo: it may hold a password
	}
	s := &Server{Kind: kind, URL: rawURL, external: true}
	hosts := strings.Split(u.Host, ",")
	s.Addr = hosts[0]
	switch kind {
	case KindRedis:
		s.DSN = s.Addr
	case KindZooKeeper, KindEtcd:
		s.DSN = u.Host
	case KindPostgres:
		s.DSN = rawURL
	case KindMySQL:
		pw, _ := u.User.Password()
		q := u.Query()
		dsn := fmt.Sprintf("%s:%s@tcp(%s)%s", u.User.Username(), pw, u.Host, u.Path)
		if len(q) > 0 {
			dsn += "?" + q.Encode()
		}
		s.DSN = dsn
	default:
		return nil, fmt.Errorf("testenv: unknown server kind %q", kind)
	}
	return s, nil
}

// helperCtx bounds a start by the test's deadline and startTimeout.
func helperCtx(t testing.TB) (context.Context, context.CancelFunc) {
	d := time.Now().Add(startTimeout)
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := dt.Deadline(); ok && dl.Before(d) {
			d = dl
		}
	}
	return context.WithDeadline(context.Background(), d)
}

// shared servers, started at most once per test binary.
type sharedEntry struct {
	once sync.Once
	val  any // *Server, []*Server, *Cluster or *Ensemble
	err  error
}

var shared = struct {
	sync.Mutex
	m     map[string]*sharedEntry
	order []string
}{m: map[string]*sharedEntry{}}

func sharedGet(t testing.TB, key string, start func(ctx context.Context) (any, error)) any {
	t.Helper()
	shared.Lock()
	e, ok := shared.m[key]
	if !ok {
		e = &sharedEntry{}
		shared.m[key] = e
		shared.order = append(shared.order, key)
	}
	shared.Unlock()
	e.once.Do(func() {
		// Not the test's deadline: the server outlives this test.
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		e.val, e.err = start(ctx)
		if e.err == nil {
			markShared(e.val)
		}
	})
	if e.err != nil {
		fail(t, e.err)
	}
	return e.val
}

func markShared(v any) {
	switch v := v.(type) {
	case *Server:
		v.shared = true
	case []*Server:
		for _, s := range v {
			s.shared = true
		}
	case *Cluster:
		v.shared = true
		for _, s := range v.Nodes {
			s.shared = true
		}
	case *Ensemble:
		v.shared = true
		for _, s := range v.Servers {
			s.shared = true
		}
	case *EtcdCluster:
		v.shared = true
		for _, s := range v.Servers {
			s.shared = true
		}
	}
}

// CloseShared stops the servers shared by this test binary and removes
// their directories. Call it from TestMain (or use Run); without it the
// servers die with the test binary (parent-death signal) and their
// directories are removed by the next test binary that starts a server.
func CloseShared() {
	shared.Lock()
	defer shared.Unlock()
	for _, k := range shared.order {
		e := shared.m[k]
		switch v := e.val.(type) {
		case *Server:
			v.close()
		case []*Server:
			for _, s := range v {
				s.close()
			}
		case *Cluster:
			v.close()
		case *Ensemble:
			v.close()
		case *EtcdCluster:
			v.close()
		}
	}
	shared.m = map[string]*sharedEntry{}
	shared.order = nil
}

// Run runs the tests and then CloseShared: func TestMain(m *testing.M) {
// os.Exit(testenv.Run(m)) }.
func Run(m interface{ Run() int }) int {
	code := m.Run()
	CloseShared()
	return code
}

// newHelper starts a dedicated server for t and closes it at t.Cleanup
// (logging the end of its log when t failed).
func newHelper(t testing.TB, kind string, start func(ctx context.Context) (*Server, error)) *Server {
	t.Helper()
	if err := available(kind, false); err != nil {
		missing(t, err)
	}
	ctx, cancel := helperCtx(t)
	defer cancel()
	s, err := start(ctx)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if tail := s.logTail(2000); tail != "" {
				t.Logf("end of %s:\n%s", s.LogPath(), tail)
			}
		}
		if err := s.close(); err != nil {
			t.Errorf("close %s: %v", s, err)
		}
	})
	return s
}

func sharedServer(t testing.TB, kind string, start func(ctx context.Context) (*Server, error)) *Server {
	t.Helper()
	if u := externalURL(kind); u != "" {
		s, err := External(kind, u)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := available(kind, false); err != nil {
		missing(t, err)
	}
	return sharedGet(t, kind, func(ctx context.Context) (any, error) { return start(ctx) }).(*Server)
}

// Redis returns a Redis server shared by the whole test binary (started
// once, on first use), or the external one named by DLOCK_TEST_REDIS_URL.
// Tests sharing it must use unique key names, and must not kill it: use
// NewRedis for fault injection.
func Redis(t testing.TB) *Server {
	t.Helper()
	return sharedServer(t, KindRedis, func(ctx context.Context) (*Server, error) { return StartRedis(ctx, nil) })
}

// NewRedis starts a dedicated Redis server for t, closed at t.Cleanup.
func NewRedis(t testing.TB, opts *RedisOptions) *Server {
	t.Helper()
	return newHelper(t, KindRedis, func(ctx context.Context) (*Server, error) { return StartRedis(ctx, opts) })
}

// RedisNodes returns n independent Redis servers (for Redlock), shared by
// the test binary per n, or the external ones named (comma-separated
// redis:// URLs, at least n) by DLOCK_TEST_REDIS_NODES.
func RedisNodes(t testing.TB, n int) []*Server {
	t.Helper()
	if v := os.Getenv(EnvRedisNodes); v != "" {
		var out []*Server
		for _, u := range strings.Split(v, ",") {
			s, err := External(KindRedis, strings.TrimSpace(u))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		if len(out) < n {
			t.Fatalf("testenv: %s names %d servers, the test needs %d", EnvRedisNodes, len(out), n)
		}
		return out[:n]
	}
	if err := available(KindRedis, false); err != nil {
		missing(t, err)
	}
	return sharedGet(t, fmt.Sprintf("redis-nodes-%d", n), func(ctx context.Context) (any, error) {
		return startRedisNodes(ctx, n)
	}).([]*Server)
}

// NewRedisNodes starts n dedicated Redis servers for t (Redlock fault
// tests), closed at t.Cleanup.
func NewRedisNodes(t testing.TB, n int, opts *RedisOptions) []*Server {
	t.Helper()
	out := make([]*Server, n)
	for i := range out {
		out[i] = NewRedis(t, opts)
	}
	return out
}

func startRedisNodes(ctx context.Context, n int) ([]*Server, error) {
	type res struct {
		i int
		s *Server
		e error
	}
	ch := make(chan res, n)
	for i := 0; i < n; i++ {
		go func() {
			s, err := StartRedis(ctx, nil)
			ch <- res{i, s, err}
		}()
	}
	out := make([]*Server, n)
	var first error
	for range n {
		r := <-ch
		out[r.i] = r.s
		if r.e != nil && first == nil {
			first = r.e
		}
	}
	if first != nil {
		for _, s := range out {
			if s != nil {
				s.close()
			}
		}
		return nil, first
	}
	return out, nil
}

// RedisCluster returns a 3-master Redis Cluster shared by the test binary.
func RedisCluster(t testing.TB) *Cluster {
	t.Helper()
	if err := available(KindRedis, false); err != nil {
		missing(t, err)
	}
	return sharedGet(t, "redis-cluster", func(ctx context.Context) (any, error) {
		return StartRedisCluster(ctx, 3)
	}).(*Cluster)
}

// NewRedisCluster starts a dedicated Redis Cluster of masters for t, closed
// at t.Cleanup.
func NewRedisCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if err := available(KindRedis, false); err != nil {
		missing(t, err)
	}
	ctx, cancel := helperCtx(t)
	defer cancel()
	c, err := StartRedisCluster(ctx, masters)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() { _ = c.close() })
	return c
}

// ZooKeeper returns a standalone ZooKeeper server shared by the test
// binary, or the external one named by DLOCK_TEST_ZK_URL.
func ZooKeeper(t testing.TB) *Server {
	t.Helper()
	return sharedServer(t, KindZooKeeper, func(ctx context.Context) (*Server, error) { return StartZooKeeper(ctx, nil) })
}

// NewZooKeeper starts a dedicated standalone ZooKeeper server for t,
// closed at t.Cleanup.
func NewZooKeeper(t testing.TB, opts *ZKOptions) *Server {
	t.Helper()
	return newHelper(t, KindZooKeeper, func(ctx context.Context) (*Server, error) { return StartZooKeeper(ctx, opts) })
}

// ZooKeeperEnsemble starts a dedicated ensemble of n servers for t, closed
// at t.Cleanup (ensembles are for fault tests: one per test).
func ZooKeeperEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	if err := available(KindZooKeeper, false); err != nil {
		missing(t, err)
	}
	ctx, cancel := helperCtx(t)
	defer cancel()
	e, err := StartZooKeeperEnsemble(ctx, n, nil)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() { _ = e.close() })
	return e
}

// Postgres returns a PostgreSQL server shared by the test binary, or the
// external one named by DLOCK_TEST_POSTGRES_URL.
func Postgres(t testing.TB) *Server {
	t.Helper()
	return sharedServer(t, KindPostgres, func(ctx context.Context) (*Server, error) { return StartPostgres(ctx, nil) })
}

// NewPostgres starts a dedicated PostgreSQL server for t, closed at
// t.Cleanup.
func NewPostgres(t testing.TB, opts *PGOptions) *Server {
	t.Helper()
	return newHelper(t, KindPostgres, func(ctx context.Context) (*Server, error) { return StartPostgres(ctx, opts) })
}

// MySQL returns a MariaDB/MySQL server shared by the test binary, or the
// external one named by DLOCK_TEST_MYSQL_URL.
func MySQL(t testing.TB) *Server {
	t.Helper()
	return sharedServer(t, KindMySQL, func(ctx context.Context) (*Server, error) { return StartMySQL(ctx, nil) })
}

// NewMySQL starts a dedicated MariaDB/MySQL server for t, closed at
// t.Cleanup.
func NewMySQL(t testing.TB, opts *MySQLOptions) *Server {
	t.Helper()
	return newHelper(t, KindMySQL, func(ctx context.Context) (*Server, error) { return StartMySQL(ctx, opts) })
}

// Etcd returns a one-member etcd cluster shared by the test binary (fsync
// on), or the external one named by DLOCK_TEST_ETCD_URL.
func Etcd(t testing.TB) *Server {
	t.Helper()
	return sharedServer(t, KindEtcd, func(ctx context.Context) (*Server, error) { return StartEtcd(ctx, nil) })
}

// NewEtcd starts a dedicated one-member etcd cluster for t, closed at
// t.Cleanup.
func NewEtcd(t testing.TB, opts *EtcdOptions) *Server {
	t.Helper()
	return newHelper(t, KindEtcd, func(ctx context.Context) (*Server, error) { return StartEtcd(ctx, opts) })
}

// SharedEtcdCluster returns a cluster of n etcd members shared by the
// test binary (per n): cases on it use names of their own and must not
// kill its members.
func SharedEtcdCluster(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	if err := available(KindEtcd, false); err != nil {
		missing(t, err)
	}
	return sharedGet(t, fmt.Sprintf("etcd-cluster-%d", n), func(ctx context.Context) (any, error) {
		return StartEtcdCluster(ctx, n, nil)
	}).(*EtcdCluster)
}

// NewEtcdCluster starts a dedicated cluster of n etcd members for t,
// closed at t.Cleanup (for fault tests).
func NewEtcdCluster(t testing.TB, n int, opts *EtcdOptions) *EtcdCluster {
	t.Helper()
	if err := available(KindEtcd, false); err != nil {
		missing(t, err)
	}
	ctx, cancel := helperCtx(t)
	defer cancel()
	c, err := StartEtcdCluster(ctx, n, opts)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() { _ = c.close() })
	return c
}
