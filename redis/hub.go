package redis

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/background"
)

// Timings of the pub/sub hub.
const (
	// confirmTimeout bounds how long Watch waits for the server to confirm
	// a new subscription; past it Watch fails and the waiter polls.
	confirmTimeout = time.Second
	// healthInterval is how long a subscription connection may stay silent
	// before the hub pings it (a broken connection is then noticed and
	// re-established, and every waiter on it is woken).
	healthInterval = 5 * time.Second
	// linger is how long a channel nobody watches stays subscribed, so that
	// the next Acquire of the same name needs no SUBSCRIBE round trip.
	linger = 30 * time.Second
	// maxIdle is the number of idle subscriptions above which they are
	// dropped without waiting for linger.
	maxIdle = 4096
	// sweepEvery is how often idle subscriptions are looked for.
	sweepEvery = time.Second
)

// hub multiplexes the release channels of one Locker over few pub/sub
// connections ("shards"): one for a single server, one per watched slot in
// a Cluster with sharded pub/sub (a resubscription after a reconnect must
// not cross slots), one per node for Redlock. A shard whose last channel
// is dropped is closed.
// Each shard has one goroutine that reads its connection and wakes the
// local waiters of the channel a message arrived on.
type hub struct {
	// route returns the keys of the shards a channel is subscribed on.
	route func(ctx context.Context, channel string) ([]string, error)
	// open returns a new, empty PubSub for a shard key (it connects on the
	// first subscription), and whether it uses sharded pub/sub
	// (SSUBSCRIBE).
	open func(key string) (ps *goredis.PubSub, sharded bool)
	// unregister removes this Locker from a name's waiter queue.
	unregister func(ctx context.Context, k keys, id string)
	// pass, if set, passes on a wake-up that reached this Locker when no
	// waiter of the name was left (Redlock: a release wakes one Locker).
	// It runs in the background, once per release message (payload).
	pass func(ctx context.Context, k keys, payload string)
	// quorum is how many shards' messages of one release (one payload)
	// wake the waiters: Redlock's quorum of nodes, 1 otherwise. A waiter
	// woken by the first node's message would try before the release ran
	// on a quorum of nodes, be refused, and miss the later nodes' wake-ups
	// (the same release's). Woken by fewer (the nodes' queues disagree,
	// or a node is down), the waiters try after minorityWake.
	quorum int
	// id names this Locker in waiter queues and wake-up channels; idArg
	// is id boxed, as acquire.lua's argument.
	id    string
	idArg any
	// tasks are the hub's goroutines (readers, writers, unregister calls);
	// cleanups take back what failed or cancelled attempts left. close
	// waits for both.
	tasks    sync.WaitGroup
	cleanups background.Group

	closing chan struct{}

	mu        sync.Mutex
	closed    bool
	subs      map[string]*sub
	shards    map[string]*shard
	lastSweep time.Time
}

// shard is one pub/sub connection, its writer goroutine (which sends the
// SUBSCRIBE and UNSUBSCRIBE commands queued in ops, in order) and its
// reader goroutine (started by the writer after the first subscription).
// No network call is made under h.mu: a waiter whose server hangs gives up
// when its ctx ends, while the writer finishes (or times out) behind it.
type shard struct {
	h       *hub
	key     string
	ps      *goredis.PubSub
	sharded bool
	kick    chan struct{} // buffered 1: ops has work
	// Guarded by h.mu.
	ops      []shardOp
	channels int // subscribed channels (subs referring to this shard)
}

// shardOp is one queued command of a shard's writer.
type shardOp struct {
	kind     opKind
	channels []string
}

type opKind int

const (
	opSubscribe opKind = iota
	opUnsubscribe
	opClose // the shard has no channel left: close its connection
)

// sub is one subscribed channel and its local waiters.
type sub struct {
	k          keys
	registered bool // a failed attempt registered this Locker in k.queue
	shards     []*shard
	waiters    map[chan struct{}]struct{}
	ready      chan struct{} // closed at the first confirmation
	confirmed  map[*shard]bool
	idleSince  time.Time // when the last waiter left
	last       string    // last payload, to drop Redlock's duplicates
	seen       int       // shards whose message of last arrived
	late       *time.Timer
	lateFor    string // the payload late wakes the waiters for
}

// minorityWake is how long after the first message of a release a waiter
// that fewer than a quorum of Redlock nodes woke tries anyway (a variable
// for a test).
var minorityWake = 5 * time.Millisecond

func newHub(route func(context.Context, string) ([]string, error), open func(string) (*goredis.PubSub, bool),
	unregister func(context.Context, keys, string), pass func(context.Context, keys, string)) *hub {
	id := rand.Text()[:16]
	return &hub{
		route:      route,
		open:       open,
		unregister: unregister,
		pass:       pass,
		id:         id,
		idArg:      id,
		quorum:     1,
		closing:    make(chan struct{}),
		subs:       make(map[string]*sub),
		shards:     make(map[string]*shard),
	}
}

// watch registers a waiter on the name of n and returns once the server
// has confirmed the subscription to this Locker's wake-up channel (n.wake),
// so that a release published after watch returns reaches the waiter.
func (h *hub) watch(ctx context.Context, n *names) (<-chan struct{}, func(), error) {
	channel := n.wake
	h.mu.Lock()
	s := h.subs[channel]
	h.mu.Unlock()
	var routes []string
	if s == nil {
		var err error
		if routes, err = h.route(ctx, channel); err != nil {
			return nil, nil, fmt.Errorf("redis: watch: %w", err)
		}
	}
	w := make(chan struct{}, 1)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, fmt.Errorf("redis: watch: %w", driver.ErrClosed)
	}
	s = h.subs[channel]
	if s == nil {
		s = &sub{
			k:         n.keys,
			waiters:   make(map[chan struct{}]struct{}),
			ready:     make(chan struct{}),
			confirmed: make(map[*shard]bool),
		}
		h.subs[channel] = s
		for _, key := range routes {
			sh := h.shards[key]
			if sh == nil {
				sh = h.newShardLocked(key)
			}
			s.shards = append(s.shards, sh)
			sh.channels++
			// Queued under h.mu so that subscribes and the sweeper's
			// unsubscribes reach the server in the order of the map's
			// changes. A failed write is not fatal: the PubSub keeps the
			// channel and subscribes again when its reader reconnects.
			sh.enqueueLocked(shardOp{kind: opSubscribe, channels: []string{channel}})
		}
	}
	s.waiters[w] = struct{}{}
	s.idleSince = time.Time{}
	ready := s.ready
	h.mu.Unlock()

	stop := func() {
		h.mu.Lock()
		delete(s.waiters, w)
		if len(s.waiters) == 0 {
			s.idleSince = time.Now()
			h.leaveIfIdleLocked(s)
		}
		h.mu.Unlock()
	}
	select {
	case <-ready:
		return w, stop, nil
	default:
	}
	t := time.NewTimer(confirmTimeout)
	defer t.Stop()
	select {
	case <-ready:
		return w, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	case <-t.C:
		stop()
		return nil, nil, fmt.Errorf("redis: watch: subscription not confirmed within %v", confirmTimeout)
	case <-h.closing:
		stop()
		return nil, nil, fmt.Errorf("redis: watch: %w", driver.ErrClosed)
	}
}

// leaveIfIdleLocked starts leave when s's name has no waiter left but the
// queue may still hold this Locker (the last waiter gave up, or won
// without a grant that cleared the registration), so that a release does
// not spend a wake-up on it. Called with h.mu held.
func (h *hub) leaveIfIdleLocked(s *sub) {
	if s.registered && len(s.waiters) == 0 && !h.closed {
		s.registered = false
		h.tasks.Add(1)
		go h.leave(s)
	}
}

// leave removes this Locker from the waiter queue of s's name, unless a
// new waiter came meanwhile.
func (h *hub) leave(s *sub) {
	defer h.tasks.Done()
	h.mu.Lock()
	idle := len(s.waiters) == 0
	h.mu.Unlock()
	if !idle {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	h.unregister(ctx, s.k, h.id)
}

// registration tells acquire.lua whether to register this Locker in the
// waiter queue of n's name: only while it has waiters on it.
func (h *hub) registration(n *names) registration {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[n.wake]
	if s == nil || len(s.waiters) == 0 {
		return registration{}
	}
	return registration{id: h.idArg, last: len(s.waiters) == 1}
}

// registered records what an attempt made with reg did to the queue: a
// failed one registered this Locker (one that returned an error may have),
// a granted one by the last waiter removed it.
func (h *hub) registered(n *names, reg registration, granted bool, err error) {
	if reg.id == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[n.wake]
	if s == nil {
		return
	}
	switch {
	case err != nil || !granted:
		s.registered = true
		h.leaveIfIdleLocked(s) // the waiters may have left meanwhile
	case reg.last:
		s.registered = false
	}
}

// newShardLocked opens the shard of a route key and starts its writer.
// Called with h.mu held.
func (h *hub) newShardLocked(key string) *shard {
	sh := &shard{h: h, key: key, kick: make(chan struct{}, 1)}
	sh.ps, sh.sharded = h.open(key)
	h.shards[key] = sh
	h.tasks.Add(1)
	go sh.write()
	return sh
}

// enqueueLocked queues a command for the writer. Called with h.mu held.
func (sh *shard) enqueueLocked(op shardOp) {
	if n := len(sh.ops); n > 0 && sh.ops[n-1].kind == op.kind && op.kind != opClose {
		sh.ops[n-1].channels = append(sh.ops[n-1].channels, op.channels...)
	} else {
		sh.ops = append(sh.ops, op)
	}
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

// write sends the queued commands in order until the shard or the hub is
// closed. Each command is bounded by confirmTimeout; the reader is started
// after the first subscription (a ClusterClient connects a PubSub to the
// owner of its first channel's slot, so it cannot read before that).
func (sh *shard) write() {
	defer sh.h.tasks.Done()
	// A shard dropped by the sweeper with its opClose still queued when the
	// hub closes is no longer in h.shards: close its connection here.
	defer sh.ps.Close()
	h := sh.h
	started := false
	for {
		select {
		case <-sh.kick:
		case <-h.closing:
			return
		}
		for {
			h.mu.Lock()
			ops := sh.ops
			sh.ops = nil
			h.mu.Unlock()
			if len(ops) == 0 {
				break
			}
			for _, op := range ops {
				select {
				case <-h.closing:
					return
				default:
				}
				if op.kind == opClose {
					return // the deferred Close ends the reader with ErrClosed
				}
				sh.do(op)
				if op.kind == opSubscribe && !started {
					started = true
					h.tasks.Add(1)
					go sh.run()
				}
			}
		}
	}
}

// do sends one SUBSCRIBE or UNSUBSCRIBE (sharded or not).
func (sh *shard) do(op shardOp) {
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	switch {
	case op.kind == opSubscribe && sh.sharded:
		_ = sh.ps.SSubscribe(ctx, op.channels...)
	case op.kind == opSubscribe:
		_ = sh.ps.Subscribe(ctx, op.channels...)
	case sh.sharded:
		_ = sh.ps.SUnsubscribe(ctx, op.channels...)
	default:
		_ = sh.ps.Unsubscribe(ctx, op.channels...)
	}
}

// run reads the shard's connection until the hub closes.
func (sh *shard) run() {
	h := sh.h
	defer h.tasks.Done()
	readPubSub(sh.ps, pubsubEvents{
		closing: h.closing,
		closed:  h.isClosed,
		// The waiters whose channel has been quiet too long are looked at
		// after each message, and after each silence.
		idle: h.sweep,
		// The connection broke: messages may have been lost. Wake every
		// waiter to try again; the next Receive reconnects.
		broken:     func() { h.disconnected(sh) },
		message:    h.deliver,
		subscribed: func(channel string) { h.confirm(sh, channel) },
	})
}

// pubsubEvents is what readPubSub does on each thing it reads.
type pubsubEvents struct {
	closing    <-chan struct{} // closed when the owner closes: no back-off then
	closed     func() bool     // the owner is closed: stop reading
	idle       func()          // optional: after each silence's ping and each message
	broken     func()          // the connection broke (before the back-off)
	message    func(channel, payload string)
	subscribed func(channel string) // a (s)subscribe was confirmed
}

// readPubSub reads a PubSub's connection until it is closed (by the
// PubSub's Close, or the owner's, ev.closed). A silence of healthInterval
// is answered with a ping, so that a dead connection fails (the PubSub
// then reconnects and subscribes again); a broken connection is reported
// (ev.broken) and the next Receive, after a back-off, reconnects.
func readPubSub(ps *goredis.PubSub, ev pubsubEvents) {
	failures := 0
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), healthInterval)
		if ev.closed() {
			return
		}
		if err != nil {
			if errors.Is(err, goredis.ErrClosed) {
				return
			}
			if isTimeout(err) {
				ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
				_ = ps.Ping(ctx)
				cancel()
				if ev.idle != nil {
					ev.idle()
				}
				continue
			}
			ev.broken()
			failures++
			select {
			case <-ev.closing:
				return
			case <-time.After(min(10*time.Millisecond<<min(failures, 7), time.Second)):
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *goredis.Message:
			ev.message(m.Channel, m.Payload)
		case *goredis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				ev.subscribed(m.Channel)
			}
		}
		if ev.idle != nil {
			ev.idle()
		}
	}
}

func (h *hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// deliver wakes the waiters of channel.
func (h *hub) deliver(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[channel]
	if s == nil {
		return
	}
	if payload != "" && payload == s.last {
		// Another node's message of the same release.
		if s.seen++; s.seen == h.quorum {
			s.wakeLocked()
		}
		return
	}
	s.last, s.seen = payload, 1
	if len(s.waiters) == 0 && h.pass != nil && payload != "" && !h.closed {
		// Woken with nobody left to try: the release woke this Locker
		// instead of another that waits.
		h.tasks.Add(1)
		go func() {
			defer h.tasks.Done()
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			h.pass(ctx, s.k, payload)
		}()
		return
	}
	if h.quorum <= 1 || payload == "" {
		s.wakeLocked()
		return
	}
	s.lateFor = payload
	rearm(&s.late, minorityWake, func() { h.wakeMinority(s) })
}

// rearm arms *t to run f after d: the timer is made at its first use and
// reset after (f is the first use's).
func rearm(t **time.Timer, d time.Duration, f func()) {
	if *t == nil {
		*t = time.AfterFunc(d, f)
		return
	}
	(*t).Reset(d)
}

// wakeMinority wakes the waiters of s when fewer than a quorum of nodes
// sent the release's message within minorityWake of the first.
func (h *hub) wakeMinority(s *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.last == s.lateFor && s.seen < h.quorum {
		s.wakeLocked()
	}
}

func (s *sub) wakeLocked() {
	for w := range s.waiters {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// confirm records the server's confirmation of a subscription. A second
// confirmation from the same shard means it reconnected and subscribed
// again: releases in between may have been missed, so waiters are woken.
func (h *hub) confirm(sh *shard, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[channel]
	if s == nil {
		return
	}
	if s.confirmed[sh] {
		s.wakeLocked()
		return
	}
	s.confirmed[sh] = true
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// disconnected wakes every waiter of the shard's channels.
func (h *hub) disconnected(sh *shard) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		if s.confirmed[sh] {
			delete(s.confirmed, sh)
			s.wakeLocked()
		}
	}
}

// sweep unsubscribes channels nobody has watched for linger, or every idle
// one when there are more than maxIdle.
func (h *hub) sweep() {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || now.Sub(h.lastSweep) < sweepEvery {
		return
	}
	h.lastSweep = now
	idle := 0
	for _, s := range h.subs {
		if len(s.waiters) == 0 {
			idle++
		}
	}
	for ch, s := range h.subs {
		if len(s.waiters) == 0 && (idle > maxIdle || now.Sub(s.idleSince) > linger) {
			delete(h.subs, ch)
			if s.late != nil {
				s.late.Stop()
			}
			for _, sh := range s.shards {
				sh.channels--
				if sh.channels > 0 {
					sh.enqueueLocked(shardOp{kind: opUnsubscribe, channels: []string{ch}})
					continue
				}
				// The shard's last channel: close its connection rather
				// than keep it (a Cluster has one shard per watched slot).
				delete(h.shards, sh.key)
				sh.enqueueLocked(shardOp{kind: opClose})
			}
		}
	}
}

// close closes every pub/sub connection and waits for the readers.
func (h *hub) close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.closing)
	h.cleanups.Stop()
	conns := make([]*goredis.PubSub, 0, len(h.shards))
	for _, sh := range h.shards {
		conns = append(conns, sh.ps)
	}
	h.mu.Unlock()
	return closeHub(conns, &h.tasks, &h.cleanups)
}

// closeHub ends a hub (hub or grantHub) whose lock has been released: it
// closes its pub/sub connections (which ends their readers), then waits
// for its goroutines and its clean-ups.
func closeHub(conns []*goredis.PubSub, tasks *sync.WaitGroup, cleanups *background.Group) error {
	var errs []error
	for _, ps := range conns {
		if err := ps.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
			errs = append(errs, err)
		}
	}
	tasks.Wait()
	cleanups.Wait()
	return errors.Join(errs...)
}

// cleanup runs f (taking back what a failed or cancelled request may have
// left on the server) in the background, so that the caller can return
// when its ctx ends; close waits for it, so it is never lost. The returned
// channel is closed when f has returned. After close it runs f at once.
func (h *hub) cleanup(f func()) <-chan struct{} { return h.cleanups.Go(f) }
