package backendtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// Hooks act on the servers behind one URL, in its driver's own layout (a
// layout change in the driver cannot leave them behind: both use
// internal/layout or the dialect's admin SQL). A nil field is a hook the
// backend, or an Env of shared servers, does not have.
type Hooks struct {
	// Revoke drops the current lease of name behind its holder's back,
	// as the server or an operator would: Redis DEL of the lock key on
	// every server, deleting the holder's ZooKeeper node, ending the
	// holder's SQL session (pg_terminate_backend, KILL) or, for the
	// version strategy, expiring its lease row. The holder is not told.
	// It fails when name is not held.
	Revoke func(ctx context.Context, name string) error
	// Residue counts what is on the servers for name besides its holder:
	// Redis lock keys without a quorum and stray keys in the name's hash
	// tag, queued ZooKeeper nodes, SQL sessions queued behind the holder.
	Residue func(ctx context.Context, name string) (int, error)
	// Orphans (ZooKeeper) waits up to 5s until no lock node is left under
	// the URL's prefix and returns the parents that still have some.
	Orphans func(ctx context.Context) ([]string, error)
	// Restart kills server i with SIGKILL and starts it again with its
	// data (i < 0: every server at once); an ensemble then serves again.
	// Servers from Backend.Start or New only.
	Restart func(ctx context.Context, i int) error
	// ExpireEarly (Redlock) makes the lock key of name expire now on
	// server i, as a clock jump on that node would; the fence counter
	// stays.
	ExpireEarly func(ctx context.Context, i int, name string) error
	// Leader (ZooKeeper ensemble) returns the index of the current leader.
	Leader func(ctx context.Context) (int, error)
	// RestartReusingIDs (MySQL) restarts the server, whose connection ids
	// start again from 1, then opens sessions until it holds one with
	// every id the server's clients had before the restart. Servers from
	// Backend.Start or New only.
	RestartReusingIDs func(ctx context.Context) (Bystanders, error)

	closers []func() error
}

// Close closes the hooks' own connections to the servers.
func (h *Hooks) Close() error {
	var errs []error
	for _, c := range h.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// lazy opens a client on first use, once.
type lazy[T any] struct {
	mu   sync.Mutex
	v    T
	err  error
	done bool
	open func() (T, error)
}

func (l *lazy[T]) get() (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.v, l.err = l.open()
		l.done = l.err == nil
	}
	return l.v, l.err
}

// ifOpen runs f on the client if it was opened.
func (l *lazy[T]) ifOpen(f func(T) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		return nil
	}
	return f(l.v)
}

// redisAdmin reaches the keys of one prefix on every server of an Env.
type redisAdmin struct {
	prefix  string
	addrs   []string
	clients lazy[[]goredis.UniversalClient] // one per server, or one ClusterClient
	cluster bool
}

func redisHooks(e *Env, _ string, u *url.URL, _ string) *Hooks {
	r := &redisAdmin{prefix: u.Query().Get("prefix"), addrs: e.Upstreams, cluster: e.Cluster != nil}
	if r.prefix == "" {
		r.prefix = layout.RedisDefaultPrefix
	}
	r.clients.open = func() ([]goredis.UniversalClient, error) {
		if r.cluster {
			return []goredis.UniversalClient{goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: e.Cluster.Addrs, DisableIdentity: true})}, nil
		}
		var cs []goredis.UniversalClient
		for _, a := range r.addrs {
			cs = append(cs, goredis.NewClient(&goredis.Options{Addr: a, DisableIdentity: true}))
		}
		return cs, nil
	}
	h := &Hooks{Revoke: r.revoke, Residue: r.residue}
	if e.Backend.Name == "redlock" {
		h.ExpireEarly = r.expireEarly
	}
	h.closers = append(h.closers, func() error {
		return r.clients.ifOpen(func(cs []goredis.UniversalClient) error {
			var errs []error
			for _, c := range cs {
				errs = append(errs, c.Close())
			}
			return errors.Join(errs...)
		})
	})
	return h
}

// revoke deletes the lock key on every server, as an eviction or an
// operator would.
func (r *redisAdmin) revoke(ctx context.Context, name string) error {
	cs, err := r.clients.get()
	if err != nil {
		return err
	}
	key := layout.RedisKeys(r.prefix, name).Lock
	var n int64
	for _, c := range cs {
		m, err := c.Del(ctx, key).Result()
		if err != nil {
			return err
		}
		n += m
	}
	if n == 0 {
		return fmt.Errorf("backendtest: redis: %q is not held (no key %s)", name, key)
	}
	return nil
}

// serversFor returns the client of each server that stores name's keys.
func (r *redisAdmin) serversFor(ctx context.Context, key string) ([]goredis.UniversalClient, error) {
	cs, err := r.clients.get()
	if err != nil {
		return nil, err
	}
	if r.cluster {
		m, err := cs[0].(*goredis.ClusterClient).MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return []goredis.UniversalClient{m}, nil
	}
	return cs, nil
}

// residue counts what is on the servers for name besides the holder's
// lock key and the fence counter: lock keys with another value than the
// holder's (a Redlock attempt not taken back) and any other key in the
// name's hash tag, but for the keys of the semaphore of the same name that
// hold its permits and its fence (its waiter registry counts, as a lock's
// grant queue does).
func (r *redisAdmin) residue(ctx context.Context, name string) (int, error) {
	k := layout.RedisKeys(r.prefix, name)
	sk := layout.RedisSemaphoreKeys(r.prefix, name)
	semKeys := []string{sk.Holders, sk.Tokens, sk.Permits, sk.Fence}
	servers, err := r.serversFor(ctx, k.Lock)
	if err != nil {
		return 0, err
	}
	votes := map[string]int{}
	stray := 0
	for _, c := range servers {
		v, err := c.Get(ctx, k.Lock).Result()
		switch {
		case err == goredis.Nil:
		case err != nil:
			return 0, err
		default:
			votes[v]++
		}
		keys, err := c.Keys(ctx, globEscape(k.Lock)+"*").Result()
		if err != nil {
			return 0, err
		}
		for _, key := range keys {
			if key != k.Lock && key != k.Fence && !slices.Contains(semKeys, key) {
				stray++
			}
		}
	}
	quorum := len(servers)/2 + 1
	left := stray
	for _, n := range votes {
		if n < quorum {
			left += n
		}
	}
	return left, nil
}

// expireEarly makes name's lock key on server i expire now (PEXPIRE 1),
// if it has a lease on it.
func (r *redisAdmin) expireEarly(ctx context.Context, i int, name string) error {
	const script = `if redis.call('PTTL', KEYS[1]) > 0 then return redis.call('PEXPIRE', KEYS[1], 1) end return 0`
	_, err := testenv.RedisDo(ctx, r.addrs[i], "EVAL", script, "1", layout.RedisKeys(r.prefix, name).Lock)
	return err
}

// globEscape quotes the glob characters of KEYS and SCAN MATCH patterns.
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

// zkAdmin is a separate ZooKeeper session for looking at (and meddling
// with) the nodes under one prefix.
type zkAdmin struct {
	prefix string
	conn   lazy[*zk.Conn]
}

func zkHooks(e *Env, _ string, u *url.URL, _ string) *Hooks {
	z := &zkAdmin{prefix: u.Path}
	if z.prefix == "" || z.prefix == "/" {
		z.prefix = layout.ZooKeeperDefaultPrefix
	}
	z.conn.open = func() (*zk.Conn, error) { return ZKConnect(e.Upstreams...) }
	h := &Hooks{Revoke: z.revoke, Residue: z.residue, Orphans: z.orphans}
	if en := e.Ensemble; en != nil {
		h.Leader = func(context.Context) (int, error) {
			l, err := en.Leader()
			if err != nil {
				return 0, err
			}
			if i := slices.Index(en.Servers, l); i >= 0 {
				return i, nil
			}
			return 0, errors.New("backendtest: zookeeper: leader not a member")
		}
	}
	h.closers = append(h.closers, func() error {
		return z.conn.ifOpen(func(c *zk.Conn) error { c.Close(); return nil })
	})
	return h
}

// ZKConnect opens a ZooKeeper session on addrs, quiet (no log lines), and
// waits until it has one.
func ZKConnect(addrs ...string) (*zk.Conn, error) {
	c, _, err := zk.Connect(addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(QuietZK{}))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			c.Close()
			return nil, errors.New("backendtest: zookeeper: no session after 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c, nil
}

// QuietZK is a go-zookeeper logger that drops every line.
type QuietZK struct{}

// Printf drops the line.
func (QuietZK) Printf(string, ...any) {}

// queue returns the children of name's parent, the holder first: by the
// sequence number ZooKeeper appends to a sequential node, a child without
// one (the basic recipe's node, a foreign one) ahead of everyone.
func (z *zkAdmin) queue(name string) (parent string, kids []string, err error) {
	c, err := z.conn.get()
	if err != nil {
		return "", nil, err
	}
	parent = layout.ZooKeeperParent(z.prefix, name)
	kids, _, err = c.Children(parent)
	if errors.Is(err, zk.ErrNoNode) {
		return parent, nil, nil
	}
	seq := func(k string) int64 {
		if len(k) >= 10 {
			if n, err := strconv.ParseInt(k[len(k)-10:], 10, 64); err == nil {
				return n
			}
		}
		return -1
	}
	slices.SortFunc(kids, func(a, b string) int {
		if sa, sb := seq(a), seq(b); sa != sb {
			return int(min(max(sa-sb, -1), 1))
		}
		return strings.Compare(a, b)
	})
	return parent, kids, err
}

// revoke deletes the holder's node, as the server does when the
// holder's session expires.
func (z *zkAdmin) revoke(ctx context.Context, name string) error {
	parent, kids, err := z.queue(name)
	if err != nil {
		return err
	}
	if len(kids) == 0 {
		return fmt.Errorf("backendtest: zookeeper: %q is not held (no child of %s)", name, parent)
	}
	c, _ := z.conn.get()
	return c.Delete(parent+"/"+kids[0], -1)
}

// residue counts the children of name's parent that are not the holder.
func (z *zkAdmin) residue(ctx context.Context, name string) (int, error) {
	_, kids, err := z.queue(name)
	return max(len(kids)-1, 0), err
}

func (z *zkAdmin) orphans(ctx context.Context) ([]string, error) {
	c, err := z.conn.get()
	if err != nil {
		return nil, err
	}
	names, _, err := c.Children(z.prefix)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var left []string
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range names {
		for {
			k, _, err := c.Children(z.prefix + "/" + n)
			if errors.Is(err, zk.ErrNoNode) || (err == nil && len(k) == 0) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				left = append(left, fmt.Sprintf("%s/%s: %v (%v)", z.prefix, n, k, err))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return left, nil
}

// sqlHooks reach a SQL server through an admin Locker on the URL (its
// dialect's admin statements, sqltest.AdminSQL).
func sqlHooks(e *Env, rawURL string, _ *url.URL, strategy string) *Hooks {
	var admin lazy[*dlock.Locker]
	admin.open = func() (*dlock.Locker, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return dlock.Open(ctx, rawURL)
	}
	h := &Hooks{
		Revoke: func(ctx context.Context, name string) error {
			l, err := admin.get()
			if err != nil {
				return err
			}
			return sqltest.Revoke(ctx, l, strategy, name)
		},
		Residue: func(ctx context.Context, name string) (int, error) {
			l, err := admin.get()
			if err != nil {
				return 0, err
			}
			return sqltest.Residue(ctx, l, name)
		},
	}
	if e.own && e.Backend.Name == "mysql" {
		h.RestartReusingIDs = mysqlRestartReusingIDs(e)
	}
	h.closers = append(h.closers, func() error { return admin.ifOpen((*dlock.Locker).Close) })
	return h
}
