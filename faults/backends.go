package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// Backend starts the servers of one backend and describes the targets
// (strategies) that run against them.
type Backend struct {
	// Name is "redis", "redlock", "zookeeper", "zookeeper-ensemble",
	// "postgres", "mysql".
	Name string
	// Kind is the testenv server kind it needs.
	Kind string
	// Scheme is the URL scheme of its driver, which must be linked in.
	Scheme string
	// Start starts the servers and returns the targets; close stops them.
	Start func(ctx context.Context) (targets []*Target, close func(), err error)
}

// Backends returns every backend the suite knows, in the order it runs
// them. A backend whose driver is not linked into the binary is reported
// as skipped by Suite.
func Backends() []*Backend {
	return []*Backend{
		{Name: "redis", Scheme: "redis", Kind: testenv.KindRedis, Start: startRedis},
		{Name: "redlock", Scheme: "redlock", Kind: testenv.KindRedis, Start: startRedlock},
		{Name: "zookeeper", Scheme: "zk", Kind: testenv.KindZooKeeper, Start: startZooKeeper},
		{Name: "zookeeper-ensemble", Scheme: "zk", Kind: testenv.KindZooKeeper, Start: startZKEnsemble},
		{Name: "postgres", Scheme: "postgres", Kind: testenv.KindPostgres, Start: startPostgres},
		{Name: "mysql", Scheme: "mysql", Kind: testenv.KindMySQL, Start: startMySQL},
	}
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

func restartOf(servers []*testenv.Server) func(ctx context.Context, i int) error {
	return func(ctx context.Context, i int) error {
		if i < 0 {
			var errs []error
			for j := range servers {
				errs = append(errs, servers[j].Kill())
			}
			for j := range servers {
				errs = append(errs, servers[j].Start(ctx))
			}
			return errors.Join(errs...)
		}
		if err := servers[i].Kill(); err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond) // down for a moment, not just a blip
		return servers[i].Start(ctx)
	}
}

func startRedis(ctx context.Context) ([]*Target, func(), error) {
	var cl closer
	// Persistence (appendfsync always) so that a restart keeps the lock
	// and its fence counter: without it a restart forgets both, as the
	// Redis documentation warns.
	s, err := testenv.StartRedis(ctx, &testenv.RedisOptions{Persistence: true})
	if err != nil {
		return nil, nil, err
	}
	cl.add(s.Close)
	primary := s
	var mu sync.Mutex
	hooks := Hooks{
		Servers: 1,
		Restart: restartOf([]*testenv.Server{s}),
		Evict: func(ctx context.Context, x *Injection) error {
			return evict(ctx, x, s.Addr)
		},
		Failover: func(ctx context.Context, x *Injection) error {
			mu.Lock()
			defer mu.Unlock()
			next, err := failover(ctx, x, primary, &cl)
			if err == nil {
				primary = next
			}
			return err
		},
	}
	t, err := newTarget(ctx, "redis", s.URL, []string{s.Addr}, hooks)
	if err != nil {
		cl.close()
		return nil, nil, err
	}
	return []*Target{t}, cl.close, nil
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

// expireEarly makes every volatile key of the Redis server at addr whose
// name contains name expire now: the lock key, whatever the driver calls
// it, but not its fence counter (which has no TTL).
func expireEarly(ctx context.Context, addr, name string) error {
	const script = `local n=0 local cur='0' repeat local r=redis.call('SCAN',cur,'MATCH',ARGV[1],'COUNT',1000) cur=r[1] for _,k in ipairs(r[2]) do if redis.call('PTTL',k)>0 then redis.call('PEXPIRE',k,1) n=n+1 end end until cur=='0' return n`
	_, err := testenv.RedisDo(ctx, addr, "EVAL", script, "0", "*"+globEscape(name)+"*")
	return err
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func startRedlock(ctx context.Context) ([]*Target, func(), error) {
	var cl closer
	var servers []*testenv.Server
	var addrs []string
	for range 3 {
		s, err := testenv.StartRedis(ctx, &testenv.RedisOptions{Persistence: true})
		if err != nil {
			cl.close()
			return nil, nil, err
		}
		cl.add(s.Close)
		servers = append(servers, s)
		addrs = append(addrs, s.Addr)
	}
	hooks := Hooks{
		Servers: len(servers),
		Restart: restartOf(servers),
		ExpireEarly: func(ctx context.Context, i int, name string) error {
			return expireEarly(ctx, servers[i].Addr, name)
		},
	}
	t, err := newTarget(ctx, "redlock", "redlock://"+strings.Join(addrs, ","), addrs, hooks)
	if err != nil {
		cl.close()
		return nil, nil, err
	}
	return []*Target{t}, cl.close, nil
}

// zkParams are the URL parameters of the ZooKeeper targets: a short
// session so that a dead holder's lock frees in about a second.
var zkParams = "?session_timeout=2s"

func startZooKeeper(ctx context.Context) ([]*Target, func(), error) {
	s, err := testenv.StartZooKeeper(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	hooks := Hooks{Servers: 1, Restart: restartOf([]*testenv.Server{s})}
	t, err := newTarget(ctx, "zookeeper", s.URL+zkParams, []string{s.Addr}, hooks)
	if err != nil {
		_ = s.Close()
		return nil, nil, err
	}
	return []*Target{t}, func() { _ = s.Close() }, nil
}

func startZKEnsemble(ctx context.Context) ([]*Target, func(), error) {
	e, err := testenv.StartZooKeeperEnsemble(ctx, 3, nil)
	if err != nil {
		return nil, nil, err
	}
	restart := restartOf(e.Servers)
	hooks := Hooks{
		Servers: len(e.Servers),
		Restart: func(ctx context.Context, i int) error {
			if err := restart(ctx, i); err != nil {
				return err
			}
			return e.WaitServing(ctx)
		},
		Leader: func(ctx context.Context) (int, error) {
			l, err := e.Leader()
			if err != nil {
				return 0, err
			}
			for i, s := range e.Servers {
				if s == l {
					return i, nil
				}
			}
			return 0, errors.New("faults: zookeeper: leader not a member")
		},
	}
	t, err := newTarget(ctx, "zookeeper-ensemble", e.URL+zkParams, e.Addrs, hooks)
	if err != nil {
		_ = e.Close()
		return nil, nil, err
	}
	return []*Target{t}, func() { _ = e.Close() }, nil
}

// sqlTargets makes one target per strategy of a SQL server.
func sqlTargets(ctx context.Context, backend string, s *testenv.Server, strategies []string) ([]*Target, error) {
	hooks := Hooks{Servers: 1, Restart: restartOf([]*testenv.Server{s})}
	var ts []*Target
	for _, st := range strategies {
		sep := "?"
		if strings.Contains(s.URL, "?") {
			sep = "&"
		}
		t, err := newTarget(ctx, backend+"/"+st, s.URL+sep+"strategy="+st, []string{s.Addr}, hooks)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

func startPostgres(ctx context.Context) ([]*Target, func(), error) {
	// synchronous_commit on (fsync stays off): a commit is written to the
	// operating system before it is acknowledged, so that a crash of the
	// server alone (the restart fault) keeps every committed token, as a
	// production server's settings would.
	s, err := testenv.StartPostgres(ctx, &testenv.PGOptions{Config: []string{"synchronous_commit=on"}})
	if err != nil {
		return nil, nil, err
	}
	ts, err := sqlTargets(ctx, "postgres", s, []string{"forupdate", "version", "advisory"})
	if err != nil {
		_ = s.Close()
		return nil, nil, err
	}
	return ts, func() { _ = s.Close() }, nil
}

func startMySQL(ctx context.Context) ([]*Target, func(), error) {
	s, err := testenv.StartMySQL(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	ts, err := sqlTargets(ctx, "mysql", s, []string{"forupdate", "version", "getlock"})
	if err != nil {
		_ = s.Close()
		return nil, nil, err
	}
	for _, t := range ts {
		t.Hooks.RestartReusingIDs = mysqlRestartReusingIDs(s)
	}
	return ts, func() { _ = s.Close() }, nil
}

// mysqlRestartReusingIDs restarts a MySQL/MariaDB server, whose connection
// ids start again from 1, and then opens connections until it holds one
// with every id that a client session had before the restart.
func mysqlRestartReusingIDs(s *testenv.Server) func(ctx context.Context) (Bystanders, error) {
	restart := restartOf([]*testenv.Server{s})
	return func(ctx context.Context) (Bystanders, error) {
		db, err := sql.Open("mysql", s.DSN)
		if err != nil {
			return nil, err
		}
		var old []int64
		rows, err := db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Daemon', 'Binlog Dump') AND USER NOT IN ('system user', 'event_scheduler')")
		if err == nil {
			for rows.Next() {
				var id int64
				if err = rows.Scan(&id); err != nil {
					break
				}
				old = append(old, id)
			}
			err = errors.Join(err, rows.Err(), rows.Close())
		}
		_ = db.Close()
		if err != nil {
			return nil, fmt.Errorf("faults: mysql: client sessions: %w", err)
		}
		if err := restart(ctx, 0); err != nil {
			return nil, err
		}
		by := &mysqlBystanders{want: map[int64]bool{}, conns: map[int64]*sql.Conn{}}
		if by.db, err = sql.Open("mysql", s.DSN); err != nil {
			return nil, err
		}
		by.db.SetMaxIdleConns(0) // a closed Conn ends its session: its id is not reused by the pool
		var hi int64
		for _, id := range old {
			by.want[id] = true
			hi = max(hi, id)
		}
		// Open connections until the server's ids pass the highest old
		// one; keep those with an old id, close the others.
		for id := int64(0); id < hi; {
			c, err := by.db.Conn(ctx)
			if err != nil {
				_ = by.Close()
				return nil, fmt.Errorf("faults: mysql: bystander session: %w", err)
			}
			if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				_ = c.Close()
				_ = by.Close()
				return nil, fmt.Errorf("faults: mysql: bystander session: %w", err)
			}
			if by.want[id] {
				by.conns[id] = c
			} else {
				_ = c.Close()
			}
		}
		return by, nil
	}
}

// mysqlBystanders are sessions holding the ids that clients had before a
// restart (some ids may have gone to clients' own new sessions instead).
type mysqlBystanders struct {
	db    *sql.DB
	want  map[int64]bool
	conns map[int64]*sql.Conn
}

func (b *mysqlBystanders) IDs() []int64 {
	ids := make([]int64, 0, len(b.conns))
	for id := range b.conns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (b *mysqlBystanders) Ended(ctx context.Context) ([]int64, error) {
	var ended []int64
	for _, id := range b.IDs() {
		var got int64
		if err := b.conns[id].QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&got); err != nil || got != id {
			ended = append(ended, id)
		}
	}
	return ended, nil
}

func (b *mysqlBystanders) Close() error {
	for _, c := range b.conns {
		_ = c.Close()
	}
	return b.db.Close()
}
