package redis

import (
	"crypto/rand"
	"hash/maphash"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
)

// names is what the driver derives from a lock name: its keys (as
// internal/layout lays them out), and the keys it sends boxed once as
// command arguments; for Redlock also this Locker's wake-up channel for
// it. It is immutable once made, but for grantCh, a cache set once.
type names struct {
	name string
	keys
	wake    string // Redlock: this Locker's wake-up channel, <channel>:<hub id>
	lockArg any
	// Semaphores: the fence, the waiter registry and the wake-up channel
	// prefix (a lock's scripts derive them from the lock key).
	fenceArg, queueArg, chanArg any
	// sem is set for a semaphore name (a cache made by newSemCache), whose
	// keys are layout.RedisSemaphoreKeys: lock is the holders' sorted set,
	// fence its own counter, queue and channel its waiter registry and
	// wake-up channel prefix (wake this Locker's), as Redlock's are.
	sem *semArgs
	// grantCh is this Locker's grant channel for the name in a Cluster
	// with sharded pub/sub (locker.grantChannel), a string made on first
	// use and kept boxed, as the scripts take it.
	grantCh atomic.Value
}

// semArgs are a semaphore's keys that a lock has not, boxed.
type semArgs struct {
	tokensArg, permitsArg any
}

// nameCache keeps the names of the lock names a Locker used lately, so that
// acquiring a name again derives and allocates nothing for it: a table of
// nameSlots entries indexed by a hash of the name, where a new name takes
// the place of the one in its slot. No lock, no growth, no sweep: a Locker
// that cycles through more names than slots pays for deriving them, no
// more.
type nameCache struct {
	prefix, hubID string // hubID: Redlock's, "" for the grant queue
	sem           bool   // semaphore names (newSemCache)
	seed          maphash.Seed
	slots         [nameSlots]atomic.Pointer[names]
}

const nameSlots = 1024 // a power of two

// newNameCache returns the cache of a Redlock Locker whose hub is hubID,
// or, with hubID "", of a single server or Cluster Locker (which boxes
// only the keys its scripts take).
func newNameCache(prefix, hubID string) *nameCache {
	return &nameCache{prefix: prefix, hubID: hubID, seed: maphash.MakeSeed()}
}

// newSemCache returns the cache of the semaphore names of a single server
// or Cluster Locker whose wake-up hub is hubID.
func newSemCache(prefix, hubID string) *nameCache {
	return &nameCache{prefix: prefix, hubID: hubID, sem: true, seed: maphash.MakeSeed()}
}

func (c *nameCache) get(name string) *names {
	slot := &c.slots[maphash.String(c.seed, name)&(nameSlots-1)]
	if n := slot.Load(); n != nil && n.name == name {
		return n
	}
	if c.sem {
		k := layout.RedisSemaphoreKeys(c.prefix, name)
		n := &names{
			name:     name,
			keys:     keys{lock: k.Holders, fence: k.Fence, queue: k.Queue, channel: k.Channel},
			wake:     k.Channel + ":" + c.hubID,
			lockArg:  k.Holders,
			fenceArg: k.Fence,
			queueArg: k.Queue,
			chanArg:  k.Channel,
			sem:      &semArgs{tokensArg: k.Tokens, permitsArg: k.Permits},
		}
		slot.Store(n)
		return n
	}
	k := keysFor(c.prefix, name)
	n := &names{name: name, keys: k, lockArg: k.lock}
	if c.hubID != "" {
		n.wake = k.channel + ":" + c.hubID
	}
	slot.Store(n)
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
