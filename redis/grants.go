package redis

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/background"
)

// grantHub receives the grants that release (handover.lua), cancel.lua and
// wait.lua publish to this Locker's waiters: one channel per Locker
// (<prefix>g:<id>), or per Locker and slot in a Cluster with sharded
// pub/sub (SPUBLISH from a script must stay in the script's slot), each
// on a pub/sub connection of its own ("shard"). The cost is flat in the
// number of names: no subscription per name, no sweep over names. A shard
// with no waiter left is closed after linger (a timer of its own), so
// that the next wait costs no SUBSCRIBE.
//
// A message is "<token>:<value>": a waiter is found by its grant value,
// which is unique. Pub/sub is at most once; a waiter's renewal, at least
// every second, takes a grant whose message was lost, and every waiter of
// a shard renews at once when its connection was re-established.
type grantHub struct {
	id string
	// open returns a new, empty PubSub for a channel and whether it uses
	// sharded pub/sub (SSUBSCRIBE).
	open func(channel string) (ps *goredis.PubSub, sharded bool)

	tasks    sync.WaitGroup
	cleanups background.Group
	closing  chan struct{}

	mu      sync.Mutex
	closed  bool
	shards  map[string]*grantShard
	waiters map[string]*grantWaiter // by grant value
}

// grantShard is one grant channel and its connection.
type grantShard struct {
	channel string
	ps      *goredis.PubSub
	sharded bool
	ready   chan struct{} // closed at the first confirmation
	// Guarded by the hub's mu.
	confirmed bool
	waiters   int
	idle      *time.Timer // closes the shard after linger without waiters
}

// grantWaiter is one blocked Acquire.
type grantWaiter struct {
	value string
	sh    *grantShard
	grant chan uint64   // buffered 1: the token of a grant to value
	kick  chan struct{} // buffered 1: renew now (the connection was re-established)
}

func newGrantHub(open func(string) (*goredis.PubSub, bool)) *grantHub {
	return &grantHub{
		id:      rand.Text()[:16],
		open:    open,
		closing: make(chan struct{}),
		shards:  make(map[string]*grantShard),
		waiters: make(map[string]*grantWaiter),
	}
}

// add registers a waiter for the grant of value on channel.
//
// Before its first request (join false), it registers only when the
// channel is subscribed already (a waiter whose first request queues it
// may be granted before that request's reply is read); when it is not,
// add returns a nil w and subscribes nothing, so that an Acquire whose
// first request takes the lock, the common case, costs no subscription
// (on a Cluster, a new connection per slot). ready is then closed once
// the server confirmed the subscription, or nil if it already was: a
// grant published before then may have been missed, so the waiter renews
// once when ready closes.
//
// A waiter that was not registered joins (join true) once its first
// request queued it, subscribing the channel if nobody has. Grants
// published before it joined may have been missed, so ready is then always
// returned, closed at (or already since) the confirmation: the waiter
// renews then, which takes such a grant.
//
// ok is false after close.
func (h *grantHub) add(value, channel string, join bool) (w *grantWaiter, ready <-chan struct{}, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, false
	}
	sh := h.shards[channel]
	if sh == nil {
		if !join {
			return nil, nil, true
		}
		sh = &grantShard{channel: channel, ready: make(chan struct{})}
		sh.ps, sh.sharded = h.open(channel)
		h.shards[channel] = sh
		h.tasks.Add(1)
		go h.run(sh)
	}
	if sh.idle != nil {
		sh.idle.Stop()
	}
	sh.waiters++
	w = &grantWaiter{value: value, sh: sh, grant: make(chan uint64, 1), kick: make(chan struct{}, 1)}
	h.waiters[value] = w
	if join || !sh.confirmed {
		ready = sh.ready
	}
	return w, ready, true
}

// remove unregisters a waiter; its shard's last waiter starts the linger
// (one timer per shard, re-armed: drop ignores a shard that has waiters
// again).
func (h *grantHub) remove(w *grantWaiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.waiters, w.value)
	sh := w.sh
	sh.waiters--
	if sh.waiters == 0 && !h.closed {
		rearm(&sh.idle, linger, func() { h.drop(sh) })
	}
}

// drop closes a shard that stayed without waiters for linger.
func (h *grantHub) drop(sh *grantShard) {
	h.mu.Lock()
	if h.closed || sh.waiters > 0 || h.shards[sh.channel] != sh {
		h.mu.Unlock()
		return
	}
	delete(h.shards, sh.channel)
	h.mu.Unlock()
	_ = sh.ps.Close() // ends run with ErrClosed
}

// run subscribes the shard's channel and reads its connection until the
// shard or the hub is closed.
func (h *grantHub) run(sh *grantShard) {
	defer h.tasks.Done()
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	// A failed write is not fatal: the PubSub keeps the channel and
	// subscribes again when Receive reconnects.
	if sh.sharded {
		_ = sh.ps.SSubscribe(ctx, sh.channel)
	} else {
		_ = sh.ps.Subscribe(ctx, sh.channel)
	}
	cancel()
	readPubSub(sh.ps, pubsubEvents{
		closing: h.closing,
		closed:  h.isClosed,
		// The connection broke: grants may have been lost. Every waiter
		// of the shard renews (which takes a grant made meanwhile); the
		// next Receive reconnects.
		broken:     func() { h.kickAll(sh) },
		message:    func(_, payload string) { h.deliver(payload) },
		subscribed: func(string) { h.confirm(sh) },
	})
}

func (h *grantHub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// deliver hands a grant message, "<token>:<value>", to its waiter.
func (h *grantHub) deliver(payload string) {
	tok, value, ok := strings.Cut(payload, ":")
	if !ok {
		return
	}
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return
	}
	h.mu.Lock()
	w := h.waiters[value]
	h.mu.Unlock()
	if w == nil {
		return // the waiter gave up: its cancel.lua hands the grant on
	}
	select {
	case w.grant <- token:
	default:
	}
}

// confirm records the server's confirmation of a shard's subscription. A
// second one means the connection was re-established: grants in between
// may have been missed, so the shard's waiters renew.
func (h *grantHub) confirm(sh *grantShard) {
	h.mu.Lock()
	first := !sh.confirmed
	sh.confirmed = true
	h.mu.Unlock()
	if first {
		close(sh.ready)
		return
	}
	h.kickAll(sh)
}

// kickAll makes every waiter of a shard renew now.
func (h *grantHub) kickAll(sh *grantShard) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.waiters {
		if w.sh == sh {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	}
}

// close closes every connection and waits for the readers and clean-ups.
func (h *grantHub) close() error {
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
		if sh.idle != nil {
			sh.idle.Stop()
		}
		conns = append(conns, sh.ps)
	}
	h.mu.Unlock()
	return closeHub(conns, &h.tasks, &h.cleanups)
}

// cleanup runs f in the background (see hub.cleanup); close waits for it.
func (h *grantHub) cleanup(f func()) <-chan struct{} { return h.cleanups.Go(f) }

// slotTags[s] is a short string whose Cluster hash slot is s: the hash
// tag of a Locker's grant channel for the names of slot s.
var (
	slotTagsOnce sync.Once
	slotTags     *[clusterSlots]string
)

// slotTag returns a hash tag that maps to slot.
func slotTag(slot int) string {
	slotTagsOnce.Do(func() {
		var t [clusterSlots]string
		left := clusterSlots
		for i := uint64(0); left > 0; i++ {
			s := strconv.FormatUint(i, 36)
			if k := crc16(s) % clusterSlots; t[k] == "" {
				t[k] = s
				left--
			}
		}
		slotTags = &t
	})
	return slotTags[slot]
}
