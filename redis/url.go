package redis

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// defaultPoolSize is the connections per server of a Locker opened from a
// URL without pool_size: go-redis's default, 10 per CPU, but at least
// minPoolSize. A Locker is shared by the process's goroutines and holds a
// connection only for the length of one request, so a pool smaller than
// the goroutines that call it at once queues them in the process: with 32
// goroutines on one Locker over 20 connections (2 CPUs) nearly every
// request waited for a connection (go-redis PoolStats.WaitCount: 0.99 per
// request), each wait a goroutine parked and woken, on the caller's path.
// Connections are opened when needed (min_idle_conns 0), so the larger
// cap costs nothing to a Locker that is never called that often at once.
func defaultPoolSize() int { return max(10*runtime.GOMAXPROCS(0), minPoolSize) }

const minPoolSize = 64

// config is what a URL says. Its errors never contain the password.
type config struct {
	scheme             string
	addrs              []string
	username, password string
	db                 int
	tls                *tls.Config
	prefix             string
	nodeTimeout        time.Duration

	dialTimeout, readTimeout, writeTimeout, poolTimeout time.Duration
	poolSize, minIdleConns, maxRetries                  int
	clientName                                          string
	clog                                                *driver.ClientLog // set by openURL
}

func openURL(ctx context.Context, raw string) (driver.Locker, error) {
	cfg, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	// The clients' failed dials are logged to the Locker's Observer, not
	// to stderr (see Logger).
	cfg.clog = driver.NewClientLog(raw)
	switch cfg.scheme {
	case SchemeCluster:
		l := newLocker(goredis.NewClusterClient(cfg.clusterOptions()), true, cfg.prefix)
		l.clog = cfg.clog
		return l, nil
	case SchemeRedlock:
		nodes := make([]goredis.UniversalClient, len(cfg.addrs))
		for i, a := range cfg.addrs {
			nodes[i] = goredis.NewClient(cfg.options(a))
		}
		r := newRedlock(nodes, true, cfg.prefix, cfg.nodeTimeout)
		r.clog = cfg.clog
		return r, nil
	}
	l := newLocker(goredis.NewClient(cfg.options(cfg.addrs[0])), true, cfg.prefix)
	l.clog = cfg.clog
	return l, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("redis: %w: "+format, append([]any{dlock.ErrInvalidOption}, args...)...)
}

// parseURL reads a redis://, rediss://, redis+cluster:// or redlock:// URL.
func parseURL(raw string) (*config, error) {
	u, err := driver.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	cfg := &config{scheme: u.Scheme}
	switch cfg.scheme {
	case Scheme, SchemeTLS, SchemeCluster, SchemeRedlock:
	default:
		return nil, invalid("unknown scheme %q", u.Scheme)
	}
	cfg.username, cfg.password = u.User, u.Password
	if len(u.Hosts) == 0 {
		return nil, invalid("missing host")
	}
	for _, h := range u.Hosts {
		a, err := hostPort(h)
		if err != nil {
			return nil, err
		}
		cfg.addrs = append(cfg.addrs, a)
	}
	if len(cfg.addrs) > 1 && (cfg.scheme == Scheme || cfg.scheme == SchemeTLS) {
		return nil, invalid("%s:// takes one host; use %s:// or %s:// for several", cfg.scheme, SchemeCluster, SchemeRedlock)
	}
	switch p := strings.Trim(u.Path, "/"); {
	case p == "":
	case cfg.scheme == SchemeCluster:
		return nil, invalid("a cluster has no database number (path %q)", u.Path)
	default:
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, invalid("path %q: want a database number such as /0", u.Path)
		}
		cfg.db = n
	}

	q := u.Params
	cfg.prefix = q.String("prefix", DefaultPrefix)
	if cfg.prefix == "" {
		cfg.prefix = DefaultPrefix
	}
	cfg.dialTimeout = q.Duration("dial_timeout", 0)
	cfg.readTimeout = q.Duration("read_timeout", 0)
	cfg.writeTimeout = q.Duration("write_timeout", 0)
	cfg.poolTimeout = q.Duration("pool_timeout", 0)
	cfg.poolSize = q.Int("pool_size", defaultPoolSize(), 1, 1<<16)
	cfg.minIdleConns = q.Int("min_idle_conns", 0, 0, 1<<16)
	cfg.maxRetries = q.Int("max_retries", -1, 0, 100)
	cfg.clientName = q.String("client_name", "")
	useTLS := cfg.scheme == SchemeTLS
	if cfg.scheme == SchemeCluster || cfg.scheme == SchemeRedlock {
		useTLS = q.Bool("tls", false)
	}
	var skipVerify bool
	if useTLS {
		skipVerify = q.Bool("skip_verify", false)
	}
	if cfg.scheme == SchemeRedlock {
		cfg.nodeTimeout = q.Duration("node_timeout", DefaultNodeTimeout)
		if cfg.nodeTimeout == 0 {
			return nil, invalid("node_timeout must be positive")
		}
	}
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if err := validPrefix(cfg.prefix); err != nil {
		return nil, err
	}
	if useTLS {
		host, _, _ := net.SplitHostPort(cfg.addrs[0])
		cfg.tls = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, InsecureSkipVerify: skipVerify}
	}
	return cfg, nil
}

// hostPort checks one host[:port] of the URL and adds the default port.
func hostPort(h string) (string, error) {
	if h == "" {
		return "", invalid("missing host")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return net.JoinHostPort(strings.Trim(h, "[]"), "6379"), nil
		}
		return "", invalid("bad host %q", h)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 || host == "" {
		return "", invalid("bad host %q", h)
	}
	return h, nil
}

// maxRetries maps the URL's max_retries (absent: -1) to go-redis's field,
// where 0 means "the default" and -1 "none". Redlock nodes default to no
// retries: a retry rarely fits in the node timeout.
func (c *config) goMaxRetries() int {
	switch {
	case c.maxRetries < 0 && c.scheme == SchemeRedlock:
		return -1
	case c.maxRetries < 0:
		return 0
	case c.maxRetries == 0:
		return -1
	}
	return c.maxRetries
}

// options are the go-redis options of one server at addr.
func (c *config) options(addr string) *goredis.Options {
	var tc *tls.Config
	if c.tls != nil {
		tc = c.tls.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			tc.ServerName = host
		}
	}
	o := &goredis.Options{
		Addr:                     addr,
		Username:                 c.username,
		Password:                 c.password,
		DB:                       c.db,
		TLSConfig:                tc,
		DialTimeout:              c.dialTimeout,
		ReadTimeout:              c.readTimeout,
		WriteTimeout:             c.writeTimeout,
		PoolTimeout:              c.poolTimeout,
		PoolSize:                 c.poolSize,
		MinIdleConns:             c.minIdleConns,
		MaxRetries:               c.goMaxRetries(),
		ClientName:               c.clientName,
		ContextTimeoutEnabled:    true,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if c.clog != nil {
		o.Dialer = routeDialErrors(goredis.NewDialer(o), c.clog)
	}
	if c.scheme == SchemeRedlock {
		// One dial per request: a dead node must cost a refused connection,
		// not go-redis's five dials 100ms apart, which exceed the node
		// timeout and turn "down" into "slow".
		o.DialerRetries = 1
	}
	return o
}

// clusterOptions are the go-redis options of a Cluster.
func (c *config) clusterOptions() *goredis.ClusterOptions {
	o := &goredis.ClusterOptions{
		Addrs:                    c.addrs,
		Username:                 c.username,
		Password:                 c.password,
		TLSConfig:                c.tls,
		DialTimeout:              c.dialTimeout,
		ReadTimeout:              c.readTimeout,
		WriteTimeout:             c.writeTimeout,
		PoolTimeout:              c.poolTimeout,
		PoolSize:                 c.poolSize,
		MinIdleConns:             c.minIdleConns,
		MaxRetries:               c.goMaxRetries(),
		ClientName:               c.clientName,
		ContextTimeoutEnabled:    true,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if c.clog != nil {
		// go-redis's own dialer for a node, as it would make it.
		dial := goredis.NewDialer(&goredis.Options{DialTimeout: c.dialTimeout, TLSConfig: c.tls})
		o.Dialer = routeDialErrors(dial, c.clog)
	}
	return o
}
