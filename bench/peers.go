package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/floor"
)

// The peers: other Go lock libraries, run through the same workloads on
// the same servers (concurrency.Mutex, etcd's own, is in etcd.go), each as shipped (its defaults, or where its defaults
// cannot wait for a lock, what its documentation recommends) and, where
// those defaults are not its best, tuned: a second row whose name says
// so. PeerNotes says exactly how each row is configured. All of them are
// built on an unfenced floor (no token), which is what their rows are
// compared with.

// peer is one peer row's implementation and what its note says.
type peer struct {
	open opener
	note string
}

// peers are the peers by Target.Impl, which is also their row's name.
var peers = map[string]peer{
	"redsync": {openRedsync(redsyncShipped), "go-redsync/redsync v4 over go-redis v9 (goredis pool), as shipped: " +
		"32 tries, a random 50-250 ms between tries (an acquire gives up after the 32nd), expiry set to the common 10 s lease"},
	"redsync tuned": {openRedsync(redsyncTuned), "go-redsync/redsync v4 over go-redis v9 (goredis pool), tuned: " +
		"WithRetryDelay(1 ms), tries unbounded (WithTries(MaxInt32): the benchmark's context ends the wait), expiry 10 s"},
	"redislock": {openRedislock(redislockShipped), "bsm/redislock, as shipped: it does not retry by default (NoRetry), " +
		"so it is given the retry its documentation recommends, ExponentialBackoff(16 ms, 256 ms) (16 ms being its " +
		"documented minimum), a fresh one per Obtain"},
	"redislock tuned": {openRedislock(redislockTuned), "bsm/redislock, tuned: RetryStrategy LinearBackoff(1 ms), " +
		"a retry every millisecond until the benchmark's context ends"},
	"zk.Lock": {openZKLock, "go-zookeeper/zk Lock as shipped (ephemeral-sequential recipe with a watch on the " +
		"predecessor: no retry delay to tune, so no tuned row; no context: a waiter cannot be cancelled)"},
	"etcd Mutex": {openEtcdMutex, etcdNotes["etcd Mutex"]},
}

// PeerNotes says how each peer is configured, by its row's name.
var PeerNotes = func() map[string]string {
	m := map[string]string{}
	for name, p := range peers {
		m[name] = p.note
	}
	return m
}()

// redisPool opens a go-redis client with its default pool for a peer.
func redisPool(t Target) (*goredis.Client, error) {
	opt, err := goredis.ParseURL(t.URL)
	if err != nil {
		return nil, err
	}
	return goredis.NewClient(opt), nil
}

type redsyncClient struct {
	rdbs   []*goredis.Client
	rs     *redsync.Redsync
	opts   []redsync.Option
	failed atomic.Uint64
}

// redsyncOptions are a redsync row's options; count counts a failed try.
type redsyncOptions func(count func()) []redsync.Option

// redsyncShipped is redsync's default retry: 32 tries, a random delay of
// 50-250 ms (written out again only to count the failed tries).
func redsyncShipped(count func()) []redsync.Option {
	return []redsync.Option{redsync.WithRetryDelayFunc(func(int) time.Duration {
		count()
		return time.Duration(50+rand.IntN(200)) * time.Millisecond
	})}
}

// redsyncTuned retries every millisecond until the context ends.
func redsyncTuned(count func()) []redsync.Option {
	return []redsync.Option{
		redsync.WithTries(math.MaxInt32),
		redsync.WithRetryDelayFunc(func(int) time.Duration { count(); return time.Millisecond }),
	}
}

// openRedsync opens redsync on one node (redis://) or, for a redlock://
// URL, on each of its independent masters (redsync is Redlock).
func openRedsync(opts redsyncOptions) opener {
	return func(ctx context.Context, t Target) (Client, error) {
		c := &redsyncClient{}
		c.opts = append([]redsync.Option{redsync.WithExpiry(LeaseTTL)}, opts(func() { c.failed.Add(1) })...)
		var pools []redsyncredis.Pool
		for _, u := range nodeURLs(t.URL) {
			rdb, err := redisPool(Target{URL: u})
			if err != nil {
				c.Close()
				return nil, err
			}
			c.rdbs = append(c.rdbs, rdb)
			pools = append(pools, redsyncgoredis.NewPool(rdb))
		}
		c.rs = redsync.New(pools...)
		return c, nil
	}
}

// nodeURLs splits redlock://[:pw@]h1,h2,h3[/db] into one redis:// URL per
// host; other URLs are returned as they are.
func nodeURLs(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "redlock" {
		return []string{raw}
	}
	var out []string
	for _, h := range strings.Split(u.Host, ",") {
		n := *u
		n.Scheme, n.Host, n.RawQuery = "redis", h, ""
		out = append(out, n.String())
	}
	return out
}

func (c *redsyncClient) Acquire(ctx context.Context, name string) (Held, error) {
	m := c.rs.NewMutex("dlockbench:redsync:"+name, c.opts...)
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return noToken{release: func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }}, nil
}

func (c *redsyncClient) FailedAttempts() uint64 { return c.failed.Load() }
func (c *redsyncClient) Close() error {
	for _, r := range c.rdbs {
		r.Close()
	}
	return nil
}

type redislockClient struct {
	rdb    *goredis.Client
	rl     *redislock.Client
	retry  func() redislock.RetryStrategy
	failed atomic.Uint64
}

// redislockShipped is the retry redislock's documentation recommends (it
// has none by default): exponential, from its documented minimum of 16 ms.
func redislockShipped() redislock.RetryStrategy {
	return redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)
}

// redislockTuned retries every millisecond.
func redislockTuned() redislock.RetryStrategy { return redislock.LinearBackoff(time.Millisecond) }

// openRedislock opens redislock with a fresh retry strategy of retry's per
// Obtain (an exponential one counts its retries).
func openRedislock(retry func() redislock.RetryStrategy) opener {
	return func(ctx context.Context, t Target) (Client, error) {
		rdb, err := redisPool(t)
		if err != nil {
			return nil, err
		}
		return &redislockClient{rdb: rdb, rl: redislock.New(rdb), retry: retry}, nil
	}
}

// countingRetry counts the retries a redislock.RetryStrategy hands out.
type countingRetry struct {
	s redislock.RetryStrategy
	n *atomic.Uint64
}

func (r countingRetry) NextBackoff() time.Duration {
	r.n.Add(1)
	return r.s.NextBackoff()
}

func (c *redislockClient) Acquire(ctx context.Context, name string) (Held, error) {
	opt := &redislock.Options{RetryStrategy: countingRetry{s: c.retry(), n: &c.failed}}
	l, err := c.rl.Obtain(ctx, "dlockbench:redislock:"+name, LeaseTTL, opt)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return noToken{release: l.Release}, nil
}

func (c *redislockClient) FailedAttempts() uint64 { return c.failed.Load() }
func (c *redislockClient) Close() error           { return c.rdb.Close() }

type zkLockClient struct {
	conn *zk.Conn
}

func openZKLock(ctx context.Context, t Target) (Client, error) {
	conn, err := floor.DialZooKeeper(ctx, t.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", t.Name, err)
	}
	return &zkLockClient{conn: conn}, nil
}

// Acquire runs zk.Lock, which takes no context: when ctx ends first, the
// Lock call is left to finish and the lock it then takes is released.
func (c *zkLockClient) Acquire(ctx context.Context, name string) (Held, error) {
	l := zk.NewLock(c.conn, "/dlockbench-zklock/"+name, zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return noToken{release: func(context.Context) error { return l.Unlock() }}, nil
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				_ = l.Unlock()
			}
		}()
		return nil, ctx.Err()
	}
}

func (c *zkLockClient) FailedAttempts() uint64 { return 0 }
func (c *zkLockClient) Close() error           { c.conn.Close(); return nil }
