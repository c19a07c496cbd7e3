package bench

import (
	"context"
	"fmt"
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
// the same servers. Each is used as its documentation shows, with its
// defaults, except where a default cannot take part in a workload (said
// in PeerNotes). They are listed in implementations (floors.go).

// PeerNotes says how each peer is configured.
var PeerNotes = map[string]string{
	"redsync": "go-redsync/redsync v4 over go-redis v9 (goredis pool), one node, defaults: 32 tries, " +
		"random 50-250 ms between tries, expiry set to the common 10 s lease",
	"redislock": "bsm/redislock, which does not retry by default: given " +
		"RetryStrategy ExponentialBackoff(16ms, 256ms) (its documented minimum), a fresh one per Obtain",
	"zk.Lock": "go-zookeeper/zk Lock (ephemeral-sequential recipe, no context: a waiter cannot be cancelled)",
}

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
	failed atomic.Uint64
}

// openRedsync opens redsync on one node (redis://) or, for a redlock://
// URL, on each of its independent masters (redsync is Redlock).
func openRedsync(ctx context.Context, t Target) (Client, error) {
	c := &redsyncClient{}
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
	m := c.rs.NewMutex("dlockbench:redsync:"+name,
		redsync.WithExpiry(LeaseTTL),
		// redsync's own default delay (50-250 ms at random), counted.
		redsync.WithRetryDelayFunc(func(int) time.Duration {
			c.failed.Add(1)
			return time.Duration(50+rand.IntN(200)) * time.Millisecond
		}))
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
	failed atomic.Uint64
}

func openRedislock(ctx context.Context, t Target) (Client, error) {
	rdb, err := redisPool(t)
	if err != nil {
		return nil, err
	}
	return &redislockClient{rdb: rdb, rl: redislock.New(rdb)}, nil
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
	opt := &redislock.Options{RetryStrategy: countingRetry{
		s: redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond), n: &c.failed}}
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
