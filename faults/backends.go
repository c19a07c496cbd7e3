package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// Backend starts the servers of one backend and describes the targets
// (strategies) that run against them.
type Backend struct {
	// Name is "redis", "redlock", "zookeeper", "zookeeper-ensemble",
	// "postgres", "mysql", "etcd", "etcd-cluster".
	Name string
	// Kind is the testenv server kind it needs.
	Kind string
	// Scheme is the URL scheme of its driver, which must be linked in.
	Scheme string
	// Start starts the servers and returns the targets; close stops them.
	Start func(ctx context.Context) (targets []*Target, close func(), err error)
}

// Backends returns every backend the suite knows, in the order it runs
// them: rows of the one backend table (internal/backendtest). A backend
// whose driver is not linked into the binary is reported as skipped by
// Suite.
func Backends() []*Backend {
	var out []*Backend
	for _, name := range []string{"redis", "redlock", "zookeeper", "zookeeper-ensemble", "postgres", "mysql", "etcd", "etcd-cluster"} {
		kb := backendtest.Lookup(name)
		out = append(out, &Backend{Name: kb.Name, Kind: kb.Kind, Scheme: kb.Scheme,
			Start: func(ctx context.Context) ([]*Target, func(), error) { return start(ctx, kb) }})
	}
	return out
}

// BackendByName returns the backend called name, or nil.
func BackendByName(name string) *Backend {
	for _, b := range Backends() {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// serverOptions are the settings of the suite's servers: every
// acknowledged write survives a crash of the server alone, as a
// production server's settings would (Redis appendfsync always, so that a
// restart keeps the lock and its fence counter; PostgreSQL
// synchronous_commit on), and a short ZooKeeper session, so that a dead
// holder's lock frees in about a second.
var serverOptions = &backendtest.Options{Persistence: true, SynchronousCommit: true, SessionTimeout: 2 * time.Second}

// start starts kb's servers and makes a target of each SQL strategy, or of
// the default (ZooKeeper's basic recipe is kept for comparison, not for
// fault runs).
func start(ctx context.Context, kb *backendtest.Backend) ([]*Target, func(), error) {
	env, err := kb.Start(ctx, serverOptions)
	if err != nil {
		return nil, nil, err
	}
	var cl closer
	cl.add(env.Close)
	strategies := []string{""}
	if kb.Param == "strategy" {
		strategies = kb.Strategies
	}
	var ts []*Target
	for _, st := range strategies {
		url := env.URL(st)
		kh := env.Hooks(url)
		cl.add(kh.Close)
		hooks := Hooks{Servers: len(env.Servers), Restart: kh.Restart, Leader: kh.Leader, ExpireEarly: kh.ExpireEarly}
		if r := kh.RestartReusingIDs; r != nil {
			hooks.RestartReusingIDs = func(ctx context.Context) (Bystanders, error) {
				b, err := r(ctx)
				if err != nil {
					return nil, err
				}
				return b, nil
			}
		}
		if len(env.Servers) > 1 && kh.Restart != nil {
			hooks.Freeze = freezer(env.Servers)
		}
		if kb.Name == "redis" {
			hooks.Evict, hooks.Failover = redisFaults(env.Servers[0], &cl)
		}
		name := kb.Name
		if st != "" {
			name += "/" + st
		}
		t, err := newTarget(ctx, name, url, env.Upstreams, hooks)
		if err != nil {
			cl.close()
			return nil, nil, err
		}
		ts = append(ts, t)
	}
	return ts, cl.close, nil
}

// newTarget opens url once to learn the backend's capabilities.
func newTarget(ctx context.Context, name, url string, ups []string, hooks Hooks) (*Target, error) {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := dlock.Open(octx, url)
	if err != nil {
		return nil, fmt.Errorf("faults: %s: %w", name, err)
	}
	caps := l.Capabilities()
	_ = l.Close()
	return &Target{Backend: name, URL: url, Upstreams: ups, Caps: caps, Hooks: hooks}, nil
}

// closer collects servers to close.
type closer struct {
	mu sync.Mutex
	fs []func() error
}

func (c *closer) add(f func() error) {
	c.mu.Lock()
	c.fs = append(c.fs, f)
	c.mu.Unlock()
}

func (c *closer) close() {
	c.mu.Lock()
	fs := c.fs
	c.fs = nil
	c.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		_ = fs[i]()
	}
}

// freezer returns the Freeze hook of servers: SIGSTOP, a wait, SIGCONT
// (also when ctx ends first, so that no server stays stopped).
func freezer(servers []*testenv.Server) func(ctx context.Context, i int, d time.Duration) error {
	return func(ctx context.Context, i int, d time.Duration) error {
		s := servers[i]
		if err := s.Pause(); err != nil {
			return err
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return s.Resume()
	}
}

// redisFaults are the fault hooks of a single Redis server that are
// server manipulations, not the driver's layout: eviction under
// maxmemory, and a failover to a replica that missed the latest writes.
func redisFaults(s *testenv.Server, cl *closer) (evictFn, failoverFn func(ctx context.Context, x *Injection) error) {
	primary := s
	var mu sync.Mutex
	evictFn = func(ctx context.Context, x *Injection) error { return evict(ctx, x, s.Addr) }
	failoverFn = func(ctx context.Context, x *Injection) error {
		mu.Lock()
		defer mu.Unlock()
		next, err := failover(ctx, x, primary, cl)
		if err == nil {
			primary = next
		}
		return err
	}
	return evictFn, failoverFn
}

// evict fills the server at addr beyond a maxmemory limit just above its
// use, with junk keys that expire later than any lease, under the
// volatile-ttl policy: the lock key (the volatile key closest to expiry)
// is the first to go, the fence counter (no TTL) stays. The limit is then
// lifted and the junk deleted.
func evict(ctx context.Context, x *Injection, addr string) error {
	info, err := testenv.RedisDo(ctx, addr, "INFO", "memory")
	if err != nil {
		return err
	}
	used := int64(0)
	for _, line := range strings.Split(fmt.Sprint(info), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			fmt.Sscan(v, &used)
		}
	}
	if used == 0 {
		return errors.New("faults: redis: no used_memory in INFO")
	}
	tag := fmt.Sprint(time.Now().UnixNano())
	const keys = 256
	fill := `for i=1,tonumber(ARGV[1]) do redis.call('SET','dlock-faults-junk:'..ARGV[2]..':'..i,string.rep('x',1024),'PX',3600000) end return 1`
	drop := `for i=1,tonumber(ARGV[1]) do redis.call('DEL','dlock-faults-junk:'..ARGV[2]..':'..i) end return 1`
	steps := [][]string{
		{"CONFIG", "SET", "maxmemory-policy", "volatile-ttl"},
		{"CONFIG", "SET", "maxmemory", fmt.Sprint(used + 64<<10)},
		{"EVAL", fill, "0", fmt.Sprint(keys), tag},
		{"PING"}, // evictions run before the next command
	}
	for _, st := range steps {
		if _, err := testenv.RedisDo(ctx, addr, st...); err != nil {
			return fmt.Errorf("faults: evict: %s: %w", st[0], err)
		}
	}
	ev := ""
	if info, err := testenv.RedisDo(ctx, addr, "INFO", "stats"); err == nil {
		for _, line := range strings.Split(fmt.Sprint(info), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "evicted_keys:"); ok {
				ev = v
			}
		}
	}
	x.Note("evict", fmt.Sprintf("maxmemory %d bytes, %d junk keys written, evicted_keys total %s", used+64<<10, keys, ev))
	sleep(ctx, x.TTL())
	_, err1 := testenv.RedisDo(ctx, addr, "CONFIG", "SET", "maxmemory", "0")
	_, err2 := testenv.RedisDo(ctx, addr, "EVAL", drop, "0", fmt.Sprint(keys), tag)
	return errors.Join(err1, err2)
}

// failover starts a replica of primary, waits until it is in sync, then
// promotes it (REPLICAOF NO ONE) while clients keep using the primary,
// waits for a grant on the primary that the replica cannot have, and
// switches every client to the replica: the grant is lost, a double grant
// follows, as the Redis documentation says of asynchronous replication.
func failover(ctx context.Context, x *Injection, primary *testenv.Server, cl *closer) (*testenv.Server, error) {
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		return nil, err
	}
	// Full sync at once, not after the default 5s diskless-sync delay.
	if _, err := testenv.RedisDo(ctx, primary.Addr, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return nil, err
	}
	rep, err := testenv.StartRedis(ctx, &testenv.RedisOptions{Persistence: true, Config: []string{"replicaof " + host + " " + port}})
	if err != nil {
		return nil, err
	}
	cl.add(rep.Close)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := testenv.RedisDo(ctx, rep.Addr, "INFO", "replication")
		if err == nil && strings.Contains(fmt.Sprint(info), "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("faults: failover: replica never in sync: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sleep(ctx, x.TTL()/2)
	if _, err := testenv.RedisDo(ctx, rep.Addr, "REPLICAOF", "NO", "ONE"); err != nil {
		return nil, err
	}
	x.Note("failover", "replica "+rep.Addr+" promoted")
	x.waitGrant(ctx, 2*x.TTL())
	if err := x.Redirect(0, rep.Addr, "failover"); err != nil {
		return nil, err
	}
	return rep, nil
}
