package redis

import (
	"context"
	"errors"
	"fmt"
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
	// (<prefix>{<name>}, <prefix>{<name>}:fence, the grant queue
	// <prefix>{<name>}:w and :wd and grant channel <prefix>g:<locker id>,
	// Redlock's <prefix>{<name>}:q and <prefix>{<name>}:rel:<locker id>,
	// a semaphore's <prefix>{<name>}:s, :s:t, :s:n, :s:fence, :s:q and
	// channel <prefix>{<name>}:s:rel:<locker id>).
	// Default DefaultPrefix, "dlock:". It must not contain '{' or '}'.
	Prefix string
	// NodeTimeout bounds each request to one Redlock node (OpenRedlock
	// only); it is also capped by the lease TTL. Default
	// DefaultNodeTimeout, 100ms.
	NodeTimeout time.Duration
	// Observer sees the Locker's events (dlock.Options.Observer).
	Observer dlock.Observer
}

func (o *Options) observer() dlock.Observer {
	if o == nil {
		return nil
	}
	return o.Observer
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
	return dlock.NewLockerWith(newLocker(client, false, opts.prefix()), &dlock.Options{Observer: opts.observer()}), nil
}

// locker is the driver for one Redis server or one Redis Cluster.
type locker struct {
	client    goredis.UniversalClient
	owned     bool // opened from a URL: Close closes it
	prefix    string
	cluster   *goredis.ClusterClient // nil for a single server
	grants    *grantHub
	gch       string // the grant channel, but per slot in a Cluster with sharded pub/sub
	gchArg    any    // gch, boxed
	names     *nameCache
	values    *grantValues
	ttl       ttlArg
	gate      evictionGate
	semHub    *hub              // wakes the waiters of semaphores (semaphore.go)
	refresher *refresher        // batches the leases' refreshes
	sems      *nameCache        // semaphore names
	clog      *driver.ClientLog // the client's dial failures (opened from a URL), or nil

	mu     sync.Mutex
	pubCmd any // "PUBLISH" or "SPUBLISH" once known
}

var (
	_ driver.Locker    = (*locker)(nil)
	_ driver.Blocker   = (*locker)(nil)
	_ driver.Inspector = (*locker)(nil)
	_ driver.Watcher   = (*locker)(nil)
)

func newLocker(client goredis.UniversalClient, owned bool, prefix string) *locker {
	l := &locker{client: client, owned: owned, prefix: prefix, values: newGrantValues(),
		refresher: newRefresher([]goredis.UniversalClient{client}, 0)}
	if cc, ok := client.(*goredis.ClusterClient); ok {
		l.cluster = cc
		l.grants = newGrantHub(l.openCluster)
	} else {
		l.pubCmd = "PUBLISH"
		l.grants = newGrantHub(func(string) (*goredis.PubSub, bool) { return client.Subscribe(context.Background()), false })
	}
	l.gch = prefix + "g:" + l.grants.id
	l.gchArg = l.gch
	l.names = newNameCache(prefix, "")
	l.semHub = l.newSemHub()
	l.sems = newSemCache(prefix, l.semHub.id)
	return l
}

// publishCommand returns the command that the grant queue's scripts
// publish with (queueScriptsFor):
// SPUBLISH on a Cluster whose servers have sharded pub/sub (Redis 7), so
// that a release reaches only the shard that owns the name; PUBLISH
// otherwise. It asks the server once. The command comes boxed.
func (l *locker) publishCommand(ctx context.Context) (any, error) {
	l.mu.Lock()
	cmd := l.pubCmd
	l.mu.Unlock()
	if cmd != nil {
		return cmd, nil
	}
	v, err := l.cluster.Do(ctx, "COMMAND", "INFO", "SPUBLISH").Slice()
	if err != nil {
		return nil, fmt.Errorf("redis: cluster: COMMAND INFO: %w", err)
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

// grantChannel returns this Locker's grant channel for the name n, and
// the same boxed as a script argument: one for every name, or one per slot
// in a Cluster with sharded pub/sub, where a script may only SPUBLISH to a
// channel of its own slot (the channel's hash tag is one of that slot).
// pubCmd is publishCommand's. A name's channel is made once and kept with
// its names (l.names is this Locker's, so its hub id is fixed): a blocking
// Acquire on a Cluster then computes no slot and allocates nothing for it.
func (l *locker) grantChannel(n *names, pubCmd any) (string, any) {
	if pubCmd != "SPUBLISH" {
		return l.gch, l.gchArg
	}
	if arg := n.grantCh.Load(); arg != nil {
		return arg.(string), arg
	}
	ch := l.prefix + "{" + slotTag(keySlot(n.lock)) + "}g:" + l.grants.id
	var arg any = ch
	n.grantCh.Store(arg)
	return ch, arg
}

// openCluster opens the pub/sub connection of a grant channel: sharded
// when the channel has a hash tag (the ClusterClient connects a sharded
// PubSub to the master that owns its first channel's slot, and
// reconnects it there).
func (l *locker) openCluster(channel string) (*goredis.PubSub, bool) {
	if strings.Contains(channel, "{") {
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
		Fair:                 true,
		Wait:                 driver.WaitQueue,
		ReleaseOnCrash:       driver.ReleaseAfterTTL,
		MinTTL:               dlock.MinTTL,
		MaxTTL:               MaxTTL,
		MaxPermits:           MaxPermits,
		SemaphoreWait:        driver.WaitNotify,
		SemaphoreFair:        false,
		Notes:                "SET NX PX + Lua (EVALSHA); a server-side FIFO queue: the release script hands the lock to the next live waiter and publishes the grant (one round trip from release to the next holder); a failover to an asynchronous replica can lose a lock",
	}
	if l.cluster != nil {
		c.Strategy = "cluster"
		c.Notes = "SET NX PX + Lua (EVALSHA), keys hash-tagged to one slot; a server-side FIFO queue: the release script hands the lock to the next live waiter and publishes the grant by sharded pub/sub (SPUBLISH, one channel per Locker and slot); a failover to an asynchronous replica can lose a lock"
	}
	return c
}

func (l *locker) Close() error {
	l.refresher.close()
	err := errors.Join(l.grants.close(), l.semHub.close())
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

func (l *locker) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	if req.Permits > 0 {
		return l.semAcquire(ctx, req)
	}
	n := l.names.get(req.Name)
	if err := l.checkLock(ctx, n.keys); err != nil {
		return nil, err
	}
	// The lease is made before the attempt: it holds the argument list
	// the attempt and the release use.
	ls := &lease{l: l, n: n, value: l.values.next(req.Owner)}
	ls.valueArg = ls.value
	granted, v, err := runAcquire(ctx, l.client, takeScript, takeArgs(ls.args[:], n, ls.valueArg, l.ttl.get(req.TTL)))
	if err != nil {
		// The script may have run with its reply lost: take back what it
		// may have set, so that nothing of the attempt blocks others. In
		// the background: a cancelled caller returns when its ctx ends,
		// not when a hung server lets the clean-up finish (Close waits
		// for it).
		l.takeBack(ctx, ls, false)
		return nil, err
	}
	if !granted {
		return nil, notAcquired(v)
	}
	ls.token = uint64(v)
	return ls, nil
}

func (l *locker) Inspect(ctx context.Context, name string) (driver.Info, error) {
	k := l.names.get(name)
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
	// The grant queue may hold entries of dead waiters that have not
	// expired yet (for at most 3s).
	if n, err := l.client.ZCard(ctx, k.waiters).Result(); err == nil {
		info.Waiters = int(n)
	}
	return info, nil
}

// takeBack undoes, in the background, what a failed or cancelled attempt
// may have left (its reply may be lost): handover.lua for a TryAcquire,
// cancel.lua for a blocking Acquire (waited: its queue entry, and a grant
// that reached it). It returns when the clean-up is done or ctx ends: a
// cancelled caller does not wait for a hung server (Close waits for the
// clean-up).
func (l *locker) takeBack(ctx context.Context, ls *lease, waited bool) {
	done := l.grants.cleanup(func() {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		cmd, cerr := l.publishCommand(cctx)
		if cerr != nil {
			return
		}
		s := queueScriptsFor(cmd).handover
		if waited {
			s = queueScriptsFor(cmd).cancel
		}
		takeBack(cctx, func(ctx context.Context) bool {
			r, err := s.run(ctx, l.client, handoverArgs(ls.args[:], s, ls.n, ls.valueArg)).Int64()
			return r == 1 || err != nil
		})
	})
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Acquire waits in the name's FIFO grant queue (see doc.go). Its first
// request takes a free lock, or queues the waiter; the waiter then
// receives its grant from the releasing script's message (no request of
// its own), and renews its entry every renewEvery(TTL), which also takes
// a grant whose message was lost.
func (l *locker) Acquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	if req.Permits > 0 {
		// Semaphores declare WaitNotify: the portable layer waits for
		// them with TryAcquire and Watch, never here.
		return nil, fmt.Errorf("redis: acquire: %w: a semaphore's waiters are woken (Watch), not queued", driver.ErrUnsupported)
	}
	n := l.names.get(req.Name)
	if err := l.checkLock(ctx, n.keys); err != nil {
		return nil, err
	}
	cmd, err := l.publishCommand(ctx)
	if err != nil {
		return nil, err
	}
	ls := &lease{l: l, n: n, value: l.values.next(req.Owner)}
	ls.valueArg = ls.value
	ttl := l.ttl.get(req.TTL)
	wait := queueScriptsFor(cmd).wait
	channel, chArg := l.grantChannel(n, cmd)
	// The waiter is registered before its first request when its channel
	// is subscribed: a release may hand it the lock and publish the grant
	// as soon as the request has queued it, before its reply is even
	// read, and a message for a value nobody has registered yet is
	// dropped. When the channel is not subscribed, nothing is: a free
	// lock costs no subscription, and a queued waiter joins below and
	// renews once its subscription is confirmed, which takes a grant it
	// missed.
	w, ready, ok := l.grants.add(ls.value, channel, false)
	if !ok {
		return nil, fmt.Errorf("redis: acquire: %w", driver.ErrClosed)
	}
	defer func() {
		if w != nil {
			l.grants.remove(w)
		}
	}()
	start := time.Now()
	granted, v, err := runAcquire(ctx, l.client, wait, waitArgs(ls.args[:], wait, n, ls.valueArg, ttl, chArg))
	if err != nil {
		l.takeBack(ctx, ls, true)
		return nil, err
	}
	if granted {
		ls.token, ls.grantedAt = uint64(v), start
		return ls, nil
	}
	if w == nil {
		if w, ready, ok = l.grants.add(ls.value, channel, true); !ok {
			l.takeBack(ctx, ls, true)
			return nil, fmt.Errorf("redis: acquire: %w", driver.ErrClosed)
		}
	}
	// safe is the start of the last request that found the waiter queued:
	// a grant came after it, so a lease counted from it ends no later than
	// on the server.
	safe := start
	every := renewEvery(req.TTL)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case token := <-w.grant:
			ls.token, ls.grantedAt = token, safe
			if time.Since(safe) <= req.TTL/4 {
				return ls, nil
			}
			// Waited long since the last renewal: refresh once, so that
			// the lease is not counted from long ago.
			s := time.Now()
			err := refreshOn(ctx, l.client, n, ls.valueArg, ttl)
			if err == nil {
				ls.grantedAt = s
				return ls, nil
			}
			if !errors.Is(err, driver.ErrNotHeld) {
				if ctx.Err() != nil {
					l.takeBack(ctx, ls, true)
					return nil, ctx.Err()
				}
				return ls, nil // counted from safe, which holds
			}
			// The grant is gone already (it expired): queue again.
		case <-ready:
			ready = nil
		case <-w.kick:
		case <-t.C:
		case <-ctx.Done():
			l.takeBack(ctx, ls, true)
			return nil, ctx.Err()
		}
		s := time.Now()
		granted, v, err := runAcquire(ctx, l.client, wait, waitArgs(ls.args[:], wait, n, ls.valueArg, ttl, chArg))
		if err != nil {
			l.takeBack(ctx, ls, true)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if granted {
			ls.token, ls.grantedAt = uint64(v), s
			return ls, nil
		}
		safe = s
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(every)
	}
}

// lease is one grant on a single server or a Cluster.
type lease struct {
	l         *locker
	n         *names
	value     string
	valueArg  any // value, boxed
	token     uint64
	grantedAt time.Time // a blocking Acquire's (see driver.Granted); zero for TryAcquire
	// args is the argument list of the acquire, then of the release
	// (which runs once, after the acquire returned).
	args [max(acquireArgc, waitArgc, handoverArgc)]any
}

var _ driver.Granted = (*lease)(nil)

func (ls *lease) Token() uint64         { return ls.token }
func (ls *lease) Lost() <-chan struct{} { return nil }

// GrantedAt is the start of the request that took the lock, or of the
// last one that found the waiter queued before its grant arrived (zero
// for TryAcquire: its request's start).
func (ls *lease) GrantedAt() time.Time { return ls.grantedAt }

// Refresh extends the lease in the Locker's next batch of refreshes (one
// pipeline: refresher).
func (ls *lease) Refresh(ctx context.Context, ttl time.Duration) error {
	out, err := ls.l.refresher.refresh(ctx, ls.n, ls.valueArg, ls.l.ttl.get(ttl), ttl)
	if err != nil {
		return err
	}
	switch o := out[0]; {
	case o.err != nil:
		return fmt.Errorf("redis: refresh: %w", o.err)
	case !o.ok:
		return fmt.Errorf("redis: refresh: %w", driver.ErrNotHeld)
	}
	return nil
}

func (ls *lease) Release(ctx context.Context) error {
	cmd, err := ls.l.publishCommand(ctx)
	if err != nil {
		return err
	}
	s := queueScriptsFor(cmd).handover
	r, err := s.run(ctx, ls.l.client, handoverArgs(ls.args[:], s, ls.n, ls.valueArg)).Int64()
	if err != nil {
		return fmt.Errorf("redis: release: %w", err)
	}
	if r != 1 {
		return fmt.Errorf("redis: release: %w", driver.ErrNotHeld)
	}
	return nil
}

// acquireArgs makes an attempt's script and its argument list in dst:
// acquire.lua when reg registers or unregisters the caller's Locker,
// otherwise take.lua's script, which answers the same from fewer
// arguments.
func acquireArgs(dst []any, n *names, value, ttl any, reg registration) (*script, []any) {
	if reg.id == nil {
		return takeScript, takeArgs(dst, n, value, ttl)
	}
	last := "0"
	if reg.last {
		last = "1"
	}
	return acquireScript, append(acquireScript.args(dst, "1"), n.lockArg, value, ttl, reg.id, regLifetimeArg, last)
}

// takeArgs makes the argument list of take.lua's script in dst.
func takeArgs(dst []any, n *names, value, ttl any) []any {
	return append(takeScript.args(dst, "1"), n.lockArg, value, ttl)
}

// runAcquire runs s, a script that answers as acquire.lua does (the token
// when granted, {n} otherwise: acquireReply), on one client.
func runAcquire(ctx context.Context, c doer, s *script, args []any) (granted bool, n int64, err error) {
	v, err := s.run(ctx, c, args).Result()
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
func refreshOn(ctx context.Context, c doer, n *names, value, ttl any) error {
	var list [refreshArgc]any
	args := append(refreshScript.args(list[:0], "1"), n.lockArg, value, ttl)
	r, err := refreshScript.run(ctx, c, args).Int64()
	if err != nil {
		return fmt.Errorf("redis: refresh: %w", err)
	}
	if r != 1 {
		return fmt.Errorf("redis: refresh: %w", driver.ErrNotHeld)
	}
	return nil
}

// waitArgs makes the argument list of wait.lua (s, a queueScripts' wait)
// in dst. runAcquire runs it: granted and the token when the caller holds
// the lock, not granted when it is queued.
func waitArgs(dst []any, s *script, n *names, value, ttl, channel any) []any {
	return append(s.args(dst, "1"), n.lockArg, value, ttl, channel)
}

// handoverArgs makes the argument list of handover.lua or cancel.lua (s)
// in dst.
func handoverArgs(dst []any, s *script, n *names, value any) []any {
	return append(s.args(dst, "1"), n.lockArg, value)
}

// releaseArgs makes release.lua's argument list in dst. pubCmd is the
// publish command, or "" not to wake anyone; the grant's value is the
// message.
func releaseArgs(dst []any, n *names, value, pubCmd any) []any {
	return append(releaseScript.args(dst, "1"), n.lockArg, value, pubCmd)
}

// releaseOn runs release.lua on one client with the list of releaseArgs
// and reports whether it deleted the key.
func releaseOn(ctx context.Context, c doer, args []any) (bool, error) {
	r, err := releaseScript.run(ctx, c, args).Int64()
	if err != nil {
		return false, fmt.Errorf("redis: release: %w", err)
	}
	return r == 1, nil
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
