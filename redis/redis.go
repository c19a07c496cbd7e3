package redis

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// URL schemes this package registers.
const (
	// Scheme opens a single Redis server (or a Sentinel-managed primary
	// behind one address): redis://host:port/db.
	Scheme = "redis"
	// SchemeTLS is Scheme over TLS: rediss://host:port/db.
	SchemeTLS = "rediss"
	// SchemeCluster opens a Redis Cluster: redis+cluster://h1:p1,h2:p2.
	SchemeCluster = "redis+cluster"
	// SchemeRedlock opens Redlock over independent masters:
	// redlock://h1:p1,h2:p2,h3:p3.
	SchemeRedlock = "redlock"
)

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "dlock:"

// DefaultNodeTimeout bounds each request to one Redlock node when
// Options.NodeTimeout is zero.
const DefaultNodeTimeout = 100 * time.Millisecond

func init() {
	for _, s := range []string{Scheme, SchemeTLS, SchemeCluster, SchemeRedlock} {
		dlock.Register(s, openURL)
	}
}

// Options configure OpenLocker and OpenRedlock. A nil *Options, and every
// zero field, means the default.
type Options struct {
	// Prefix is prepended to every key and channel the driver uses
	// (<prefix>{<name>}, <prefix>{<name>}:fence, <prefix>{<name>}:q,
	// <prefix>{<name>}:rel:<locker id>).
	// Default DefaultPrefix, "dlock:". It must not contain '{' or '}'.
	Prefix string
	// NodeTimeout bounds each request to one Redlock node (OpenRedlock
	// only); it is also capped by the lease TTL. Default
	// DefaultNodeTimeout, 100ms.
	NodeTimeout time.Duration
}

func (o *Options) prefix() string {
	if o == nil || o.Prefix == "" {
		return DefaultPrefix
	}
	return o.Prefix
}

func (o *Options) nodeTimeout() time.Duration {
	if o == nil || o.NodeTimeout <= 0 {
		return DefaultNodeTimeout
	}
	return o.NodeTimeout
}

func validPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("redis: prefix %q must not contain '{' or '}' (the name's hash tag follows it): %w", p, dlock.ErrInvalidOption)
	}
	return nil
}

// OpenLocker returns a Locker on an existing client: a *goredis.Client
// (single node, or a Sentinel failover client) or a *goredis.ClusterClient
// (Redis Cluster, with sharded pub/sub when the servers have it). Closing
// the Locker does not close the client. Pass a client created with
// ContextTimeoutEnabled so that a context deadline bounds each request.
//
// OpenLocker returns an error wrapping dlock.ErrInvalidOption if client
// is nil or opts.Prefix contains '{' or '}'.
func OpenLocker(client goredis.UniversalClient, opts *Options) (*dlock.Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("redis: OpenLocker needs a client: %w", dlock.ErrInvalidOption)
	}
	if err := validPrefix(opts.prefix()); err != nil {
		return nil, err
	}
	return dlock.NewLocker(newLocker(client, false, opts.prefix())), nil
}

// locker is the driver for one Redis server or one Redis Cluster.
type locker struct {
	client  goredis.UniversalClient
	owned   bool // opened from a URL: Close closes it
	prefix  string
	cluster *goredis.ClusterClient // nil for a single server
	hub     *hub
	gate    evictionGate

	mu     sync.Mutex
	pubCmd string // "PUBLISH" or "SPUBLISH" once known
}

var (
	_ driver.Locker    = (*locker)(nil)
	_ driver.Watcher   = (*locker)(nil)
	_ driver.Inspector = (*locker)(nil)
)

func newLocker(client goredis.UniversalClient, owned bool, prefix string) *locker {
	l := &locker{client: client, owned: owned, prefix: prefix}
	unregister := func(ctx context.Context, k keys, id string) { client.ZRem(ctx, k.queue, id) }
	if cc, ok := client.(*goredis.ClusterClient); ok {
		l.cluster = cc
		l.hub = newHub(l.routeCluster, l.openCluster, unregister)
		return l
	}
	l.pubCmd = "PUBLISH"
	l.hub = newHub(
		func(context.Context, string) ([]string, error) { return []string{""}, nil },
		func(string) (*goredis.PubSub, bool) { return client.Subscribe(context.Background()), false },
		unregister,
	)
	return l
}

// publishCommand returns the command that release.lua publishes with:
// SPUBLISH on a Cluster whose servers have sharded pub/sub (Redis 7), so
// that a release reaches only the shard that owns the name; PUBLISH
// otherwise. It asks the server once.
func (l *locker) publishCommand(ctx context.Context) (string, error) {
	l.mu.Lock()
	cmd := l.pubCmd
	l.mu.Unlock()
	if cmd != "" {
		return cmd, nil
	}
	v, err := l.cluster.Do(ctx, "COMMAND", "INFO", "SPUBLISH").Slice()
	if err != nil {
		return "", fmt.Errorf("redis: cluster: COMMAND INFO: %w", err)
	}
	cmd = "PUBLISH"
	if len(v) == 1 && v[0] != nil {
		cmd = "SPUBLISH"
	}
	l.mu.Lock()
	l.pubCmd = cmd
	l.mu.Unlock()
	return cmd, nil
}

// routeCluster puts a channel on the pub/sub connection of its slot
// (sharded pub/sub), or on one connection for all channels (classic
// pub/sub, which a Cluster broadcasts to every node). One connection per
// slot, not per master: go-redis re-sends every channel of a connection in
// one SSUBSCRIBE when it reconnects, which the server refuses (CROSSSLOT)
// when the channels hash to different slots, and every wake-up of that
// connection would be lost for good.
func (l *locker) routeCluster(ctx context.Context, channel string) ([]string, error) {
	cmd, err := l.publishCommand(ctx)
	if err != nil {
		return nil, err
	}
	if cmd == "PUBLISH" {
		return []string{"p"}, nil
	}
	return []string{"s" + strconv.Itoa(keySlot(channel))}, nil
}

// openCluster opens the pub/sub connection of a routeCluster key. The
// ClusterClient connects a sharded PubSub to the master that owns its
// first channel's slot, and reconnects it there.
func (l *locker) openCluster(key string) (*goredis.PubSub, bool) {
	if strings.HasPrefix(key, "s") {
		return l.cluster.SSubscribe(context.Background()), true
	}
	return l.cluster.Subscribe(context.Background()), false
}

func (l *locker) Capabilities() driver.Capabilities {
	c := driver.Capabilities{
		Backend:              "redis",
		Strategy:             "set-nx",
		Fencing:              true,
		FencingNote:          "per-name INCR counter bumped by the acquire script; it never expires, is kept across restarts only when the server persists every write (appendonly, appendfsync always); servers with an allkeys-* eviction policy, which could evict it, are refused",
		TokensSurviveRestart: false,
		Fair:                 false,
		Wait:                 driver.WaitNotify,
		ReleaseOnCrash:       driver.ReleaseAfterTTL,
		MinTTL:               dlock.MinTTL,
		MaxTTL:               MaxTTL,
		Notes:                "SET NX PX + Lua (EVALSHA); a release wakes by pub/sub the two Lockers queued longest (roughly in turn, not strictly fair); a failover to an asynchronous replica can lose a lock",
	}
	if l.cluster != nil {
		c.Strategy = "cluster"
		c.Notes = "SET NX PX + Lua (EVALSHA), keys hash-tagged to one slot; a release wakes by sharded pub/sub (SPUBLISH) the two Lockers queued longest (roughly in turn, not strictly fair); a failover to an asynchronous replica can lose a lock"
	}
	return c
}

func (l *locker) Close() error {
	err := l.hub.close()
	if l.owned {
		if cerr := l.client.Close(); cerr != nil && !errors.Is(cerr, goredis.ErrClosed) {
			err = errors.Join(err, cerr)
		}
	}
	if err != nil {
		return fmt.Errorf("redis: close: %w", err)
	}
	return nil
}

func (l *locker) Watch(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return l.hub.watch(ctx, keysFor(l.prefix, name))
}

func (l *locker) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	k := keysFor(l.prefix, req.Name)
	if err := l.checkLock(ctx, k); err != nil {
		return nil, err
	}
	id := rand.Text()
	value := ownerValue(id, req.Owner)
	reg := l.hub.registration(k)
	granted, n, err := acquireOn(ctx, l.client, k, value, req.TTL, reg)
	l.hub.registered(k, reg, granted, err)
	if err != nil {
		// The script may have run with its reply lost: take back what it
		// may have set, so that nothing of the attempt blocks others. In
		// the background: a cancelled caller returns when its ctx ends,
		// not when a hung server lets the clean-up finish (Close waits
		// for it).
		done := l.hub.cleanup(func() {
			cctx, cancel := cleanupContext(ctx)
			defer cancel()
			cmd, cerr := l.publishCommand(cctx)
			if cerr != nil {
				return
			}
			takeBack(cctx, func(ctx context.Context) bool {
				ok, err := releaseOn(ctx, l.client, k, value, cmd, id)
				return ok || err != nil
			})
		})
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil, err
	}
	if !granted {
		return nil, notAcquired(n)
	}
	return &lease{l: l, k: k, id: id, value: value, token: uint64(n)}, nil
}

func (l *locker) Inspect(ctx context.Context, name string) (driver.Info, error) {
	k := keysFor(l.prefix, name)
	v, err := inspectScript.Run(ctx, l.client, []string{k.lock, k.fence}).Slice()
	if err != nil {
		return driver.Info{}, fmt.Errorf("redis: inspect: %w", err)
	}
	value, held, pttl, fence := inspectReply(v)
	info := driver.Info{Held: held, Fence: fence, Waiters: -1}
	if held {
		info.Owner = ownerOf(value)
		info.TTL = fromMillis(pttl)
	}
	return info, nil
}

// lease is one grant on a single server or a Cluster.
type lease struct {
	l     *locker
	k     keys
	id    string
	value string
	token uint64
}

func (ls *lease) Token() uint64         { return ls.token }
func (ls *lease) Lost() <-chan struct{} { return nil }

func (ls *lease) Refresh(ctx context.Context, ttl time.Duration) error {
	return refreshOn(ctx, ls.l.client, ls.k, ls.value, ttl)
}

func (ls *lease) Release(ctx context.Context) error {
	cmd, err := ls.l.publishCommand(ctx)
	if err != nil {
		return err
	}
	ok, err := releaseOn(ctx, ls.l.client, ls.k, ls.value, cmd, ls.id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("redis: release: %w", driver.ErrNotHeld)
	}
	return nil
}

// acquireOn runs acquire.lua on one client. n is the token when granted,
// the holder's PTTL in milliseconds otherwise.
func acquireOn(ctx context.Context, c goredis.Scripter, k keys, value string, ttl time.Duration, reg registration) (granted bool, n int64, err error) {
	last := "0"
	if reg.last {
		last = "1"
	}
	v, err := acquireScript.Run(ctx, c, []string{k.lock, k.fence, k.queue}, value, millis(ttl), reg.id, millis(regLifetime), last).Slice()
	if err != nil {
		return false, 0, fmt.Errorf("redis: acquire: %w", err)
	}
	granted, n, ok := acquireReply(v)
	if !ok {
		return false, 0, fmt.Errorf("redis: acquire: unexpected reply %v", v)
	}
	return granted, n, nil
}

// refreshOn runs refresh.lua on one client: nil when extended, ErrNotHeld
// when the key is gone or another owner's.
func refreshOn(ctx context.Context, c goredis.Scripter, k keys, value string, ttl time.Duration) error {
	n, err := refreshScript.Run(ctx, c, []string{k.lock}, value, millis(ttl)).Int64()
	if err != nil {
		return fmt.Errorf("redis: refresh: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("redis: refresh: %w", driver.ErrNotHeld)
	}
	return nil
}

// releaseOn runs release.lua on one client and reports whether it deleted
// the key.
func releaseOn(ctx context.Context, c goredis.Scripter, k keys, value, pubCmd, id string) (bool, error) {
	n, err := releaseScript.Run(ctx, c, []string{k.lock, k.queue}, value, pubCmd, id, k.channel, wakeCount).Int64()
	if err != nil {
		return false, fmt.Errorf("redis: release: %w", err)
	}
	return n == 1, nil
}

// notAcquired reports a held lock with the holder's remaining PTTL.
func notAcquired(pttl int64) error {
	return fmt.Errorf("redis: %w", &driver.NotAcquiredError{RetryAfter: fromMillis(pttl)})
}

// takeBack runs release, which reports whether it is done (it deleted the
// attempt's key, or failed), and when it found nothing runs it once more
// after retakeDelay. A request whose reply was lost may still sit in the
// server's socket buffer (a paused or overloaded server): the first
// release can then run before it, and the second, sent after the first's
// answer, after it.
func takeBack(ctx context.Context, release func(ctx context.Context) (done bool)) {
	if release(ctx) {
		return
	}
	t := time.NewTimer(retakeDelay)
	defer t.Stop()
	select {
	case <-t.C:
		release(ctx)
	case <-ctx.Done():
	}
}

// retakeDelay separates takeBack's two releases.
const retakeDelay = 50 * time.Millisecond

// cleanupTimeout bounds clean-up after a failed or cancelled request.
const cleanupTimeout = 2 * time.Second

func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}
