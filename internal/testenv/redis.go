package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RedisOptions configure StartRedis and NewRedis. The zero value (or nil)
// is an in-memory server without persistence.
type RedisOptions struct {
	// Persistence turns the append-only file on with appendfsync always, so
	// that Kill followed by Start keeps every acknowledged write. Off, the
	// server keeps nothing on disk (save "", appendonly no).
	Persistence bool
	// Config are extra redis.conf lines, appended last (so they win), e.g.
	// "maxmemory 10mb" or "maxmemory-policy allkeys-lru".
	Config []string

	cluster bool // internal: cluster-enabled yes (StartRedisCluster)
}

func redisServerPath() (string, error) {
	if p := os.Getenv("DLOCK_REDIS_SERVER"); p != "" {
		if !fileExists(p) {
			return "", &missingError{what: p + " (DLOCK_REDIS_SERVER)"}
		}
		return p, nil
	}
	return lookPath("redis-server")
}

// StartRedis starts a redis-server on a free loopback port. Close it when
// done.
func StartRedis(ctx context.Context, opts *RedisOptions) (*Server, error) {
	if dockerMode() {
		return startDockerRedis(ctx, opts)
	}
	if opts == nil {
		opts = &RedisOptions{}
	}
	bin, err := redisServerPath()
	if err != nil {
		return nil, err
	}
	return startLocal(KindRedis, syscall.SIGTERM, func(s *Server) error {
		s.command = func() *exec.Cmd { return newCmd(nil, s.Dir, bin, filepath.Join(s.Dir, "redis.conf")) }
		return s.startOnFreePort(ctx, func() error {
			port, err := redisPort(opts.cluster)
			if err != nil {
				return err
			}
			return writeRedisConf(s, port, opts)
		})
	})
}

// redisPort picks a free port; a cluster node also needs port+10000 (its
// cluster bus port) free, which works with every Redis version.
func redisPort(cluster bool) (int, error) {
	for i := 0; i < 100; i++ {
		ps, err := freePorts(1)
		if err != nil {
			return 0, err
		}
		if !cluster || (ps[0]+10000 <= 65535 && portFree(ps[0]+10000)) {
			return ps[0], nil
		}
	}
	return 0, errors.New("testenv: no free port pair for a redis cluster node")
}

func writeRedisConf(s *Server, port int, opts *RedisOptions) error {
	s.Addr = loopback(port)
	s.DSN = s.Addr
	s.URL = "redis://" + s.Addr + "/0"
	s.Settings = map[string]string{"appendonly": "no", "save": `""`}
	lines := []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"protected-mode no",
		"daemonize no",
		"dir " + s.Dir,
		"logfile \"\"",
		"save \"\"",
		"databases 16",
	}
	if opts.Persistence {
		lines = append(lines, "appendonly yes", "appendfsync always")
		s.Settings["appendonly"] = "yes"
		s.Settings["appendfsync"] = "always"
	} else {
		lines = append(lines, "appendonly no")
	}
	if opts.cluster {
		lines = append(lines, "cluster-enabled yes", "cluster-config-file nodes.conf",
			"cluster-node-timeout 2000")
	}
	for _, l := range opts.Config {
		lines = append(lines, l)
		if k, v, ok := strings.Cut(strings.TrimSpace(l), " "); ok {
			s.Settings[k] = strings.TrimSpace(v)
		}
	}
	s.ready = func(ctx context.Context) error {
		v, err := RedisDo(ctx, s.Addr, "PING")
		if err != nil {
			return err
		}
		if v != "PONG" {
			return fmt.Errorf("testenv: redis: PING answered %v", v)
		}
		// The answer must come from our process, not from another server
		// that took the port first (this one then fails to bind).
		v, err = RedisDo(ctx, s.Addr, "INFO", "server")
		if err != nil {
			return err
		}
		info, _ := v.(string)
		if pid := s.Pid(); pid != 0 && infoField(info, "process_id") != strconv.Itoa(pid) {
			return fmt.Errorf("testenv: redis %s: answered by process %s, not ours (%d)", s.Addr, infoField(info, "process_id"), pid)
		}
		if s.Version == "" {
			s.Version = infoField(info, "redis_version")
		}
		return nil
	}
	return os.WriteFile(filepath.Join(s.Dir, "redis.conf"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// Cluster is a Redis Cluster of masters on loopback.
type Cluster struct {
	// Nodes are the masters, in slot order.
	Nodes []*Server
	// URL is "redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...".
	URL string
	// Addrs are the nodes' host:port addresses.
	Addrs []string
	// StartupTime is the time until every node reported cluster_state:ok.
	StartupTime time.Duration

	shared bool
}

// StartRedisCluster starts masters (at least 3) redis-servers with
// cluster-enabled yes, assigns them the 16384 slots in equal ranges, joins
// them with CLUSTER MEET and waits until every node reports
// cluster_state:ok. Close it when done.
func StartRedisCluster(ctx context.Context, masters int) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("testenv: a redis cluster needs at least 3 masters, not %d", masters)
	}
	if dockerMode() {
		return nil, fmt.Errorf("testenv: redis cluster: %w", errDockerUnsupported)
	}
	t0 := time.Now()
	c := &Cluster{}
	for i := 0; i < masters; i++ {
		s, err := StartRedis(ctx, &RedisOptions{cluster: true})
		if err != nil {
			c.close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	c.URL = "redis+cluster://" + strings.Join(c.Addrs, ",")
	for i, s := range c.Nodes {
		lo, hi := i*16384/masters, (i+1)*16384/masters
		args := []string{"CLUSTER", "ADDSLOTS"}
		for slot := lo; slot < hi; slot++ {
			args = append(args, strconv.Itoa(slot))
		}
		if _, err := RedisDo(ctx, s.Addr, args...); err != nil {
			c.close()
			return nil, fmt.Errorf("testenv: redis cluster: %s: %w", s.Addr, err)
		}
	}
	// Every node meets every other: the cluster converges without waiting
	// for gossip to spread the news.
	for i, a := range c.Nodes {
		for _, b := range c.Nodes[i+1:] {
			host, port, _ := strings.Cut(b.Addr, ":")
			if _, err := RedisDo(ctx, a.Addr, "CLUSTER", "MEET", host, port); err != nil {
				c.close()
				return nil, fmt.Errorf("testenv: redis cluster: meet %s: %w", b.Addr, err)
			}
		}
	}
	if err := c.WaitOK(ctx); err != nil {
		c.Close()
		return nil, err
	}
	c.StartupTime = time.Since(t0)
	return c, nil
}

// WaitOK waits until every node knows every other and reports
// cluster_state:ok (after a node was killed and restarted, say).
func (c *Cluster) WaitOK(ctx context.Context) error {
	return poll(ctx, "redis cluster not ok", func() error {
		for _, s := range c.Nodes {
			v, err := RedisDo(ctx, s.Addr, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			info, _ := v.(string)
			if infoField(info, "cluster_state") != "ok" ||
				infoField(info, "cluster_known_nodes") != strconv.Itoa(len(c.Nodes)) ||
				infoField(info, "cluster_slots_ok") != "16384" {
				fields := strings.Fields(info)
				return fmt.Errorf("%s: %s", s.Addr, strings.Join(fields[:min(6, len(fields))], " "))
			}
		}
		return nil
	})
}

// Close closes every node.
func (c *Cluster) Close() error {
	if c.shared {
		return ErrShared
	}
	return c.close()
}

func (c *Cluster) close() error { return closeServers(c.Nodes) }
