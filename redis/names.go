package redis

import (
	"crypto/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// names is what the driver derives from a lock name: its keys (as
// internal/layout lays them out), this Locker's wake-up channel for it, and
// the keys boxed once as command arguments. It is immutable once made.
type names struct {
	keys
	wake                                 string // this Locker's wake-up channel: <channel>:<hub id>
	lockArg, fenceArg, queueArg, chanArg any
}

// nameCache keeps the names of the lock names a Locker used lately, so that
// acquiring a name again derives and allocates nothing for it. It holds at
// most maxCachedNames entries and starts afresh when full: a Locker that
// cycles through more names pays for deriving them, no more.
type nameCache struct {
	prefix, hubID string

	mu sync.Mutex
	m  map[string]*names
}

const maxCachedNames = 4096

func newNameCache(prefix, hubID string) *nameCache {
	return &nameCache{prefix: prefix, hubID: hubID, m: make(map[string]*names)}
}

func (c *nameCache) get(name string) *names {
	c.mu.Lock()
	n := c.m[name]
	c.mu.Unlock()
	if n != nil {
		return n
	}
	k := keysFor(c.prefix, name)
	n = &names{keys: k, wake: k.channel + ":" + c.hubID,
		lockArg: k.lock, fenceArg: k.fence, queueArg: k.queue, chanArg: k.channel}
	c.mu.Lock()
	if len(c.m) >= maxCachedNames {
		c.m = make(map[string]*names)
	}
	c.m[name] = n
	c.mu.Unlock()
	return n
}

// grantValues makes the values that mark a grant as its owner's in the
// lock key (release and refresh compare them): a random prefix drawn once
// per Locker from crypto/rand (130 bits, so that no two Lockers share one,
// in one process or across restarts) followed by a counter (so that one
// Locker never repeats a value). Cheaper than drawing random bytes for
// every grant, and as unique.
type grantValues struct {
	prefix string
	n      atomic.Uint64
}

func newGrantValues() *grantValues { return &grantValues{prefix: rand.Text()} }

// next returns a new grant's value: the unique part, then "|" and owner
// (Request.Owner, kept for Inspect; ownerOf reads it back).
func (g *grantValues) next(owner string) string {
	var buf [64]byte
	b := append(buf[:0], g.prefix...)
	b = strconv.AppendUint(b, g.n.Add(1), 36)
	b = append(b, '|')
	b = append(b, owner...)
	return string(b)
}

// ttlArg is a TTL in milliseconds boxed as a command argument, kept for the
// next grant with the same TTL (boxing an int64 allocates).
type ttlArg struct {
	p atomic.Pointer[ttlBox]
}

type ttlBox struct {
	ttl time.Duration
	arg any
}

func (t *ttlArg) get(ttl time.Duration) any {
	if b := t.p.Load(); b != nil && b.ttl == ttl {
		return b.arg
	}
	b := &ttlBox{ttl: ttl, arg: millis(ttl)}
	t.p.Store(b)
	return b.arg
}
