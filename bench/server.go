package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/testenv"
)

// Server is one server the targets run on: started by dlockbench through
// testenv, or named by the user with -url.
type Server struct {
	// ID names the server in reports: "redis", "zookeeper", "postgres", "mysql".
	ID      string `json:"id"`
	Backend string `json:"backend"`
	// URL is the server's URL (it may hold a password; never reported).
	URL string `json:"-"`
	// Addr is host:port.
	Addr string `json:"addr"`
	// PID is the server's process (0 when it was not started here): its
	// CPU time is read from /proc/<pid>/stat and its children's.
	PID int `json:"pid,omitempty"`
	// Origin says who started it: "testenv" or "user".
	Origin string `json:"origin"`
	// Startup is how long starting it took.
	Startup time.Duration `json:"startup_ns,omitempty"`
	// Settings are the server settings that change results.
	Settings map[string]string `json:"settings"`
	// Nodes are the member servers of a multi-node setup (Redlock's
	// independent masters, a Redis Cluster): samples are their sums.
	Nodes []*Server `json:"nodes,omitempty"`

	rdb  *goredis.Client
	tree cachedTree
}

// ServerSample is a reading of a server's counters.
type ServerSample struct {
	Commands uint64
	// Requests counts, of Commands, the requests clients sent, where a
	// Redis script call is one request and the commands it runs are
	// none (see redisRequest). Set with Commands.
	Requests    uint64
	HasCommands bool
	CPU         time.Duration
	HasCPU      bool
	// Grants is, in a delta, how many grants the readings surround when
	// they do not surround all of a result's (RunAlternating reads them
	// around some slices only); 0 means all of them.
	Grants uint64
}

// ServerDelta is the server's work between two samples.
type ServerDelta = ServerSample

// Sub returns s − o, with only the counters both have.
func (s ServerSample) Sub(o ServerSample) ServerDelta {
	var d ServerDelta
	if s.HasCommands && o.HasCommands && s.Commands >= o.Commands {
		d.Commands, d.HasCommands = s.Commands-o.Commands, true
		d.Requests = s.Requests - min(o.Requests, s.Requests)
	}
	if s.HasCPU && o.HasCPU && s.CPU >= o.CPU {
		d.CPU, d.HasCPU = s.CPU-o.CPU, true
	}
	return d
}

// Sample reads the server's command count (Redis: INFO commandstats, the
// INFO calls themselves excluded) and its CPU time (when PID is known).
func (s *Server) Sample(ctx context.Context) ServerSample { return s.sample(ctx, false) }

// SampleSteady is Sample for a stretch in which the server's clients stay
// connected (RunAlternating's): the server's process tree is listed from
// /proc once a second at most and only its known members are read in
// between, so that a reading around every short slice costs microseconds,
// not the milliseconds of a scan of /proc. Runs whose clients connect
// anew (Runner.Run) use Sample, which finds every new server process.
func (s *Server) SampleSteady(ctx context.Context) ServerSample { return s.sample(ctx, true) }

func (s *Server) sample(ctx context.Context, steady bool) ServerSample {
	var out ServerSample
	if len(s.Nodes) > 0 {
		out.HasCommands, out.HasCPU = true, true
		for _, n := range s.Nodes {
			ns := n.sample(ctx, steady)
			out.Commands += ns.Commands
			out.Requests += ns.Requests
			out.CPU += ns.CPU
			out.HasCommands = out.HasCommands && ns.HasCommands
			out.HasCPU = out.HasCPU && ns.HasCPU
		}
		return out
	}
	if s.Backend == "redis" {
		if n, r, err := s.redisCommands(ctx); err == nil {
			out.Commands, out.Requests, out.HasCommands = n, r, true
		}
	}
	if s.PID > 0 {
		cpu, err := ProcessTreeCPU(s.PID)
		if steady {
			cpu, err = s.tree.cpu(s.PID)
		}
		if err == nil {
			out.CPU, out.HasCPU = cpu, true
		}
	}
	return out
}

func (s *Server) redis() (*goredis.Client, error) {
	if s.rdb == nil {
		opt, err := goredis.ParseURL(s.URL)
		if err != nil {
			return nil, err
		}
		opt.PoolSize = 1
		s.rdb = goredis.NewClient(opt)
	}
	return s.rdb, nil
}

func (s *Server) redisCommands(ctx context.Context) (cmds, reqs uint64, err error) {
	c, err := s.redis()
	if err != nil {
		return 0, 0, err
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	cmds, reqs = sumCommandStats(info)
	return cmds, reqs, nil
}

// sumCommandStats adds the calls of every command in an INFO commandstats
// reply except INFO itself (a line it cannot read counts nothing): all of
// them, a script's own redis.call commands included, and the requests
// among them (redisRequest).
func sumCommandStats(info string) (cmds, reqs uint64) {
	calls, _ := testenv.RedisCommandCalls(info)
	for name, c := range calls {
		if name == "info" {
			continue
		}
		cmds += uint64(c)
		if redisRequest[name] {
			reqs += uint64(c)
		}
	}
	return cmds, reqs
}

// redisRequest names the commands that only a client sends, never a
// script: the script calls themselves and the connection and pub/sub
// commands. INFO commandstats counts a script's redis.call commands as
// calls of their own, and cannot tell a SET a client sent from one a
// script ran; so the requests counted are exactly a client's only when it
// sends nothing but these, as dlock's Redis driver does (every lock
// operation is a script). The waiters curve's target (≤ 3 per grant with
// 64 waiters on one Locker) counts requests.
var redisRequest = map[string]bool{
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true,
	"subscribe": true, "unsubscribe": true, "ssubscribe": true, "sunsubscribe": true,
	"psubscribe": true, "punsubscribe": true, "ping": true, "script": true, "hello": true,
	"client": true, "select": true, "auth": true, "cluster": true, "readonly": true,
}

// Close closes the server's metrics connection (not the server).
func (s *Server) Close() {
	for _, n := range s.Nodes {
		n.Close()
	}
	if s.rdb != nil {
		s.rdb.Close()
		s.rdb = nil
	}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times on Linux.
const clockTicks = 100

// ProcessTreeCPU returns the CPU time (user + system) of process pid, its
// reaped children, and its live descendants (PostgreSQL runs a process per
// connection).
func ProcessTreeCPU(pid int) (time.Duration, error) { return treeCPU(pid) }

// ReadSettings records the server settings that change results: Redis
// persistence, ZooKeeper forceSync, PostgreSQL synchronous_commit and
// fsync, MySQL innodb_flush_log_at_trx_commit and sync_binlog.
func (s *Server) ReadSettings(ctx context.Context) {
	if s.Settings == nil {
		s.Settings = map[string]string{}
	}
	set := func(k, v string) { s.Settings[k] = v }
	fail := func(err error) { set("error", err.Error()) }
	if len(s.Nodes) > 0 {
		s.Nodes[0].ReadSettings(ctx)
		for k, v := range s.Nodes[0].Settings {
			set(k, v)
		}
		set("nodes", strconv.Itoa(len(s.Nodes)))
		return
	}
	switch s.Backend {
	case "redis":
		c, err := s.redis()
		if err != nil {
			fail(err)
			return
		}
		for _, k := range []string{"save", "appendonly", "appendfsync"} {
			if v, err := c.ConfigGet(ctx, k).Result(); err == nil {
				set(k, v[k])
			}
		}
		if info, err := c.Info(ctx, "server").Result(); err == nil {
			set("version", infoField(info, "redis_version"))
		}
	case "zookeeper":
		s.zkSettings(set)
	case "etcd":
		s.etcdSettings(ctx, set)
	case "postgres", "mysql":
		conn := pgConn
		keys := []string{"synchronous_commit", "fsync", "server_version", "shared_buffers", "max_connections"}
		query := func(k string) string { return "SHOW " + k }
		if s.Backend == "mysql" {
			conn = myConn
			keys = []string{"version", "innodb_flush_log_at_trx_commit", "sync_binlog", "log_bin", "max_connections"}
			query = func(k string) string { return "SELECT CAST(@@" + k + " AS CHAR)" }
		}
		c, err := conn(ctx, Target{Name: s.ID, URL: s.URL})
		if err != nil {
			fail(err)
			return
		}
		defer c.close()
		for _, k := range keys {
			if v, err := c.text(ctx, query(k)); err == nil {
				set(k, v)
			}
		}
	}
}

func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// zkSettings reads forceSync from the server's command line
// (-Dzookeeper.forceSync) or its configuration file (forceSync=), when
// the server runs here; ZooKeeper's default is yes (fsync every write).
func (s *Server) zkSettings(set func(k, v string)) {
	if s.PID <= 0 {
		set("forceSync", "unknown (server not started by dlockbench)")
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.PID))
	if err != nil {
		set("forceSync", "unknown")
		return
	}
	force := "yes (ZooKeeper's default)"
	for _, arg := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(arg, "-Dzookeeper.forceSync="); ok {
			force = v
		}
		if strings.HasSuffix(arg, ".cfg") {
			if cfg, err := os.ReadFile(arg); err == nil {
				for _, line := range strings.Split(string(cfg), "\n") {
					if v, ok := strings.CutPrefix(strings.TrimSpace(line), "forceSync="); ok {
						force = v
					}
				}
			}
		}
	}
	set("forceSync", force)
	if jar := javaVersion(b); jar != "" {
		set("zookeeper_jar", jar)
	}
}

// javaVersion finds the zookeeper jar's file name on a java command line.
func javaVersion(cmdline []byte) string {
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		for _, part := range strings.Split(arg, ":") {
			if b := filepath.Base(part); strings.HasPrefix(b, "zookeeper") && strings.HasSuffix(b, ".jar") {
				return b
			}
		}
	}
	return ""
}

// Ping makes one round trip to check that the server answers.
func (s *Server) Ping(ctx context.Context) error {
	impl := rttImpl[s.Backend]
	if impl == "" {
		return nil
	}
	c, err := Open(ctx, Target{Name: s.ID, Kind: KindRTT, Impl: impl, URL: s.URL})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Acquire(ctx, "ping")
	return err
}

// hostOf returns a URL's host:port list.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}
