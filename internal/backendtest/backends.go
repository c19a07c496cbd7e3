// Package backendtest is the one table of the backends dlock's tests and
// commands run against: how to start each one's servers (fresh ones the
// caller owns, or the test binary's shared ones), the URL of each
// strategy, the hooks that reach behind a holder's back in the driver's
// own key layout (revoke, residue, restart, ...), and a conformance
// harness built from them, whose Lockers reach the servers through the one
// proxy (internal/netproxy).
//
// The test packages of the drivers, cmd/dlock, faults and dlockbench use
// it; none keeps a table of its own.
package backendtest

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

// Backend is one row of the table.
type Backend struct {
	// Name is "redis", "redlock", "redis-cluster", "zookeeper",
	// "zookeeper-ensemble", "postgres", "mysql", "etcd" or "etcd-cluster".
	Name string
	// Scheme is the URL scheme of its driver, which must be linked in.
	Scheme string
	// Module is the module of the driver when it is not the library's
	// (etcd: github.com/dlock-go/dlock/etcd, whose client pulls in grpc):
	// only a test binary that imports it can open its URLs.
	Module string
	// Kind is the testenv server kind it needs.
	Kind string
	// Param is the URL parameter that selects a strategy ("strategy",
	// ZooKeeper's "recipe"), or "" when the backend has one.
	Param string
	// Strategies are the values of Param; the first is the driver's
	// default.
	Strategies []string
	// Nodes is the number of servers it starts by default (Redlock
	// masters, cluster masters, ensemble members); 1 for a single server.
	Nodes int

	start  func(ctx context.Context, o *Options) (*Env, error)
	shared func(t testing.TB, o *Options) *Env
	hooks  func(e *Env, rawURL string, u *url.URL, strategy string) *Hooks
	// namespace returns rawURL on the namespace ns (a key prefix, a
	// znode path); nil: the backend has none (SQL names are unique).
	namespace func(rawURL, ns string) string
	// cut is how Disconnect cuts a Locker's proxies (cutNone: the client
	// learns the servers' own addresses and would go around them).
	cut cutMode
}

// Options are the settings servers are started with, and URL parameters.
// The zero value is testenv's defaults.
type Options struct {
	// Nodes overrides Backend.Nodes (Redlock masters, cluster masters,
	// ensemble members).
	Nodes int
	// Persistence (Redis): appendfsync always, so that a restart keeps
	// the lock and its fence counter (without it a restart forgets both,
	// as the Redis documentation warns). Fresh servers only.
	Persistence bool
	// SynchronousCommit (PostgreSQL): synchronous_commit=on (fsync stays
	// off): a commit reaches the operating system before it is
	// acknowledged, so that a crash of the server alone keeps every
	// committed token, as a production server's settings would. Fresh
	// servers only.
	SynchronousCommit bool
	// ForceSync (ZooKeeper): fsync every write, ZooKeeper's own default
	// (testenv starts it with forceSync=no). Fresh servers only.
	ForceSync bool
	// UnsafeNoFsync (etcd): --unsafe-no-fsync (testenv keeps etcd's
	// fsync by default). Fresh servers only.
	UnsafeNoFsync bool
	// SessionTimeout (ZooKeeper): the session_timeout URL parameter; a
	// short one frees a dead holder's lock quickly. Other backends'
	// URLs ignore it.
	SessionTimeout time.Duration
}

// resolve returns a copy of o (nil: the zero value) with Nodes set.
func (o *Options) resolve(b *Backend) *Options {
	r := Options{}
	if o != nil {
		r = *o
	}
	if r.Nodes <= 0 {
		r.Nodes = b.Nodes
	}
	return &r
}

// Backends returns the table, in the order runs use it.
func Backends() []*Backend {
	return []*Backend{
		{Name: "redis", Scheme: "redis", Kind: testenv.KindRedis, Nodes: 1,
			start: startRedis, shared: sharedRedis, hooks: redisHooks, namespace: redisNamespace, cut: cutClose},
		{Name: "redlock", Scheme: "redlock", Kind: testenv.KindRedis, Nodes: 3,
			start: startRedlock, shared: sharedRedlock, hooks: redisHooks, namespace: redisNamespace, cut: cutClose},
		{Name: "redis-cluster", Scheme: "redis+cluster", Kind: testenv.KindRedis, Nodes: 3,
			start: startRedisCluster, shared: sharedRedisCluster, hooks: redisHooks, namespace: redisNamespace, cut: cutNone},
		{Name: "zookeeper", Scheme: "zk", Kind: testenv.KindZooKeeper, Nodes: 1, Param: "recipe", Strategies: []string{"fair", "basic"},
			start: startZooKeeper, shared: sharedZooKeeper, hooks: zkHooks, namespace: zkNamespace, cut: cutSilent},
		{Name: "zookeeper-ensemble", Scheme: "zk", Kind: testenv.KindZooKeeper, Nodes: 3, Param: "recipe", Strategies: []string{"fair", "basic"},
			start: startZKEnsemble, shared: newZKEnsemble, hooks: zkHooks, namespace: zkNamespace, cut: cutSilent},
		{Name: "postgres", Scheme: "postgres", Kind: testenv.KindPostgres, Nodes: 1, Param: "strategy", Strategies: []string{"forupdate", "version", "advisory"},
			start: startPostgres, shared: sharedPostgres, hooks: sqlHooks, cut: cutSilent},
		{Name: "mysql", Scheme: "mysql", Kind: testenv.KindMySQL, Nodes: 1, Param: "strategy", Strategies: []string{"forupdate", "version", "getlock"},
			start: startMySQL, shared: sharedMySQL, hooks: sqlHooks, cut: cutSilent},
		{Name: "etcd", Scheme: "etcd", Module: etcdModule, Kind: testenv.KindEtcd, Nodes: 1,
			start: startEtcd, shared: sharedEtcd, hooks: etcdHooks, namespace: etcdNamespace, cut: cutClose},
		{Name: "etcd-cluster", Scheme: "etcd", Module: etcdModule, Kind: testenv.KindEtcd, Nodes: 3,
			start: startEtcdCluster, shared: newEtcdCluster, hooks: etcdHooks, namespace: etcdNamespace, cut: cutClose},
	}
}

const etcdModule = "github.com/dlock-go/dlock/etcd"

// Lookup returns the backend called name, or nil.
func Lookup(name string) *Backend {
	for _, b := range Backends() {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// Start starts fresh servers that the caller owns (it may kill, restart
// and fail them over) and closes with Env.Close.
func (b *Backend) Start(ctx context.Context, o *Options) (*Env, error) {
	o = o.resolve(b)
	e, err := b.start(ctx, o)
	if err != nil {
		return nil, err
	}
	e.Backend, e.opts, e.own = b, o, true
	return e, nil
}

// New starts fresh servers for t, closed at t.Cleanup; t is skipped (or
// failed, under DLOCK_REQUIRE_BACKENDS) when the server is not installed.
func (b *Backend) New(t testing.TB, o *Options) *Env {
	t.Helper()
	testenv.Require(t, b.Kind)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e, err := b.Start(ctx, o)
	if err != nil {
		t.Fatalf("backendtest: start %s: %v", b.Name, err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// Shared returns the test binary's shared servers (testenv.Redis,
// RedisNodes, RedisCluster, ZooKeeper, Postgres, MySQL, Etcd): cases on
// them use names of their own and must not harm them, so its hooks cannot
// restart them. A ZooKeeper ensemble or an etcd cluster is never shared:
// it is New's.
func (b *Backend) Shared(t testing.TB, o *Options) *Env {
	t.Helper()
	if o != nil && (o.Persistence || o.SynchronousCommit || o.ForceSync || o.UnsafeNoFsync) {
		t.Fatalf("backendtest: %s: shared servers run with testenv's settings; use New for other ones", b.Name)
	}
	o = o.resolve(b)
	e := b.shared(t, o)
	e.Backend, e.opts = b, o
	return e
}

// Env is a backend's running servers.
type Env struct {
	Backend *Backend
	// Servers are the server processes (one, or the nodes/members).
	Servers []*testenv.Server
	// Upstreams are the servers' addresses as the URLs name them, in
	// order (what a proxy stands in for).
	Upstreams []string
	// Ensemble is the ZooKeeper ensemble, when it is one.
	Ensemble *testenv.Ensemble
	// Cluster is the Redis Cluster, when it is one.
	Cluster *testenv.Cluster
	// EtcdCluster is the etcd cluster of several members, when it is one.
	EtcdCluster *testenv.EtcdCluster

	base  string // URL without strategy or options
	opts  *Options
	own   bool // started by Start: hooks may restart the servers
	close func() error

	closeOnce sync.Once
	closeErr  error
}

// URL returns the dlock URL of strategy ("" for the driver's default,
// without the parameter), with the options' URL parameters.
func (e *Env) URL(strategy string) string {
	u := e.base
	if e.opts.SessionTimeout > 0 && e.Backend.Kind == testenv.KindZooKeeper {
		u = testenv.WithParams(u, "session_timeout", e.opts.SessionTimeout.String())
	}
	if strategy != "" {
		if e.Backend.Param == "" {
			panic("backendtest: " + e.Backend.Name + " has no strategies")
		}
		u = testenv.WithParams(u, e.Backend.Param, strategy)
	}
	return u
}

// Namespace returns rawURL (one of URL's) on a namespace of its own, id
// (letters, digits, '-', '_', '.'): the key prefix "dlockct:<id>:"
// (Redis), the path "/dlockct/<id>" (ZooKeeper). SQL URLs are returned as
// they are: cases there use names of their own.
func (e *Env) Namespace(rawURL, id string) string {
	if e.Backend.namespace == nil {
		return rawURL
	}
	return e.Backend.namespace(rawURL, id)
}

// Hooks returns the hooks acting on the servers behind rawURL (one of
// URL's, perhaps namespaced), in its driver's layout. Close them.
func (e *Env) Hooks(rawURL string) *Hooks {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic("backendtest: " + err.Error()) // URLs come from URL
	}
	strategy := u.Query().Get(e.Backend.Param)
	if strategy == "" && len(e.Backend.Strategies) > 0 {
		strategy = e.Backend.Strategies[0]
	}
	h := e.Backend.hooks(e, rawURL, u, strategy)
	if e.own {
		h.Restart = e.restart
	}
	return h
}

// Close stops servers that Start started; shared ones are left running.
func (e *Env) Close() error {
	e.closeOnce.Do(func() {
		if e.close != nil {
			e.closeErr = e.close()
		}
	})
	return e.closeErr
}

// restart kills server i with SIGKILL and starts it again with its data
// (i < 0: every server, all down at once), waiting for an ensemble to
// serve again.
func (e *Env) restart(ctx context.Context, i int) error {
	var err error
	if i < 0 {
		var errs []error
		for _, s := range e.Servers {
			errs = append(errs, s.Kill())
		}
		// Start them together: a member of a cluster is not ready until
		// a quorum is up (etcd answers nothing before).
		starts := make([]error, len(e.Servers))
		var wg sync.WaitGroup
		for j, s := range e.Servers {
			wg.Go(func() { starts[j] = s.Start(ctx) })
		}
		wg.Wait()
		err = errors.Join(append(errs, starts...)...)
	} else {
		if err := e.Servers[i].Kill(); err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond) // down for a moment, not just a blip
		err = e.Servers[i].Start(ctx)
	}
	if err == nil && e.Ensemble != nil {
		err = e.Ensemble.WaitServing(ctx)
	}
	if err == nil && e.EtcdCluster != nil {
		err = e.EtcdCluster.WaitHealthy(ctx)
	}
	return err
}

// single makes the Env of one server.
func single(s *testenv.Server, own bool) *Env {
	e := &Env{Servers: []*testenv.Server{s}, Upstreams: []string{s.Addr}, base: s.URL}
	if own {
		e.close = s.Close
	}
	return e
}

func addrs(servers []*testenv.Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr
	}
	return out
}

func closeAll(servers []*testenv.Server) func() error {
	return func() error {
		var errs []error
		for _, s := range servers {
			if s != nil {
				errs = append(errs, s.Close())
			}
		}
		return errors.Join(errs...)
	}
}

func startRedis(ctx context.Context, o *Options) (*Env, error) {
	s, err := testenv.StartRedis(ctx, &testenv.RedisOptions{Persistence: o.Persistence})
	if err != nil {
		return nil, err
	}
	return single(s, true), nil
}

func sharedRedis(t testing.TB, _ *Options) *Env { return single(testenv.Redis(t), false) }

func redlockEnv(servers []*testenv.Server) *Env {
	a := addrs(servers)
	return &Env{Servers: servers, Upstreams: a, base: "redlock://" + strings.Join(a, ",")}
}

func startRedlock(ctx context.Context, o *Options) (*Env, error) {
	n := o.Nodes
	servers := make([]*testenv.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() {
			servers[i], errs[i] = testenv.StartRedis(ctx, &testenv.RedisOptions{Persistence: o.Persistence})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = closeAll(servers)()
		return nil, err
	}
	e := redlockEnv(servers)
	e.close = closeAll(servers)
	return e, nil
}

func sharedRedlock(t testing.TB, o *Options) *Env {
	return redlockEnv(testenv.RedisNodes(t, o.Nodes))
}

func clusterEnv(c *testenv.Cluster) *Env {
	return &Env{Servers: c.Nodes, Upstreams: c.Addrs, Cluster: c, base: c.URL}
}

func startRedisCluster(ctx context.Context, o *Options) (*Env, error) {
	c, err := testenv.StartRedisCluster(ctx, o.Nodes)
	if err != nil {
		return nil, err
	}
	e := clusterEnv(c)
	e.close = c.Close
	return e, nil
}

func sharedRedisCluster(t testing.TB, o *Options) *Env {
	if n := o.Nodes; n != 3 {
		t.Fatalf("backendtest: the shared cluster has 3 masters, not %d", n)
	}
	return clusterEnv(testenv.RedisCluster(t))
}

// redisNamespace puts the keys of rawURL under the prefix dlockct:<id>:.
func redisNamespace(rawURL, id string) string {
	return testenv.WithParams(rawURL, "prefix", "dlockct:"+id+":")
}

func startZooKeeper(ctx context.Context, o *Options) (*Env, error) {
	s, err := testenv.StartZooKeeper(ctx, &testenv.ZKOptions{ForceSync: o.ForceSync})
	if err != nil {
		return nil, err
	}
	return single(s, true), nil
}

func sharedZooKeeper(t testing.TB, _ *Options) *Env { return single(testenv.ZooKeeper(t), false) }

func ensembleEnv(en *testenv.Ensemble) *Env {
	return &Env{Servers: en.Servers, Upstreams: en.Addrs, Ensemble: en, base: en.URL}
}

func startZKEnsemble(ctx context.Context, o *Options) (*Env, error) {
	en, err := testenv.StartZooKeeperEnsemble(ctx, o.Nodes, &testenv.ZKOptions{ForceSync: o.ForceSync})
	if err != nil {
		return nil, err
	}
	e := ensembleEnv(en)
	e.close = en.Close
	return e, nil
}

// newZKEnsemble is the ensemble's Shared: a dedicated ensemble for t
// (testenv shares none), whose hooks may restart its members.
func newZKEnsemble(t testing.TB, o *Options) *Env {
	e := ensembleEnv(testenv.ZooKeeperEnsemble(t, o.Nodes))
	e.own = true
	return e
}

// zkNamespace puts the nodes of rawURL under the path /dlockct/<id>.
func zkNamespace(rawURL, id string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic("backendtest: " + err.Error())
	}
	u.Path = "/dlockct/" + id
	return u.String()
}

func startPostgres(ctx context.Context, o *Options) (*Env, error) {
	var po testenv.PGOptions
	if o.SynchronousCommit {
		po.Config = append(po.Config, "synchronous_commit=on")
	}
	s, err := testenv.StartPostgres(ctx, &po)
	if err != nil {
		return nil, err
	}
	return single(s, true), nil
}

func sharedPostgres(t testing.TB, _ *Options) *Env { return single(testenv.Postgres(t), false) }

func startMySQL(ctx context.Context, _ *Options) (*Env, error) {
	s, err := testenv.StartMySQL(ctx, nil)
	if err != nil {
		return nil, err
	}
	return single(s, true), nil
}

func sharedMySQL(t testing.TB, _ *Options) *Env { return single(testenv.MySQL(t), false) }
