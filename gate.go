package dlock

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
)

// The gate admits a Locker's own attempts on a name to the server one at a
// time, so that goroutines of one Locker never compete with each other
// there: ten TryAcquire calls of one Redlock Locker would otherwise split
// the nodes' votes and all fail, and 64 waiters of one Locker would each
// watch and each try on every release.
//
// Per name it keeps who of this Locker is at the server (at most one
// attempt: the head), the live holds of this Locker, and a FIFO queue of
// blocking Acquires waiting locally:
//
//   - A blocking Acquire becomes the head when nobody of this Locker is at
//     the server and, unless the driver queues natively (driver.Blocker),
//     no lease of this Locker holds the name; otherwise it queues locally.
//     With a Blocker the head waits in the server's queue even while a
//     sibling holds the name, so that its place among other Lockers'
//     waiters is the server's to give (fairness stays the server's).
//   - When the head is granted or gives up, or a local hold of the name
//     ends (release, loss, expiry), the next local waiter is made head at
//     once, without a server round trip. A released lock always goes back
//     to the server: it is never handed to a sibling locally.
//   - TryAcquire fails with ErrNotAcquired without a server call while a
//     live lease of this Locker holds the name or the head is waiting for
//     it (its last try found it held); while the head's single try is in
//     flight it waits for that try's outcome, then decides again.
//
// Entries live in a sharded map and are removed when idle (no attempt, no
// hold): the gate's size is the number of names in use, and no operation
// looks at more than one entry.
type gates struct {
	seed   maphash.Seed
	shards [gateShards]gateShard
}

const gateShards = 64

type gateShard struct {
	mu sync.Mutex
	m  map[string]*gateEntry
}

// gateEntry is one name's state, guarded by its shard's mu.
type gateEntry struct {
	name   string
	refs   int           // passes (attempts admitted or queued) plus holds
	busy   bool          // an attempt of this Locker is at the server (the head)
	trying bool          // ... and it is one try in flight, not a wait
	change chan struct{} // closed at the next change of busy, trying or holds; made on demand
	holds  []*hold       // live holds of this Locker on the name
	queue  []*gateWaiter // blocking Acquires waiting locally, first first
	hold1  [1]*hold      // holds' first backing array: one hold costs no allocation
}

// gateWaiter is a blocking Acquire queued locally.
type gateWaiter struct {
	ready chan struct{} // receives once when the waiter is made the head
	head  bool          // made the head (guarded by the shard's mu)
}

// gatePass is an admitted attempt, the head of its name; a hold keeps its
// pass (its reference to the entry) until ungate. Nobody uses a pass after
// it gave its reference back: the entry may be recycled then.
type gatePass struct {
	s *gateShard
	e *gateEntry
}

func (g *gates) init() {
	g.seed = maphash.MakeSeed()
	for i := range g.shards {
		g.shards[i].m = make(map[string]*gateEntry)
	}
}

func (g *gates) shard(name string) *gateShard {
	return &g.shards[maphash.String(g.seed, name)%gateShards]
}

// entries recycles idle entries: a name's first use costs no allocation.
// An entry is put back only when nothing refers to it any more (refs 0:
// no pass, no hold, no local waiter).
var entries = sync.Pool{New: func() any { return new(gateEntry) }}

// entryLocked returns name's entry, making it, with one more reference.
// s.mu is held.
func (s *gateShard) entryLocked(name string) *gateEntry {
	e := s.m[name]
	if e == nil {
		e = entries.Get().(*gateEntry)
		e.name = name
		e.holds = e.hold1[:0]
		s.m[name] = e
	}
	e.refs++
	return e
}

// unrefLocked drops one reference, removing an idle entry. s.mu is held.
func (s *gateShard) unrefLocked(e *gateEntry) {
	e.refs--
	if e.refs == 0 {
		delete(s.m, e.name)
		*e = gateEntry{}
		entries.Put(e)
	}
}

// changedLocked wakes everyone waiting for a change of e. s.mu is held.
func (e *gateEntry) changedLocked() {
	if e.change != nil {
		close(e.change)
		e.change = nil
	}
}

// changeLocked returns a channel closed at e's next change. s.mu is held.
func (e *gateEntry) changeLocked() <-chan struct{} {
	if e.change == nil {
		e.change = make(chan struct{})
	}
	return e.change
}

// advanceLocked makes the first local waiter the head when the server is
// free for it. native: the driver queues natively, so the head may wait at
// the server while a sibling holds the name. s.mu is held.
func (e *gateEntry) advanceLocked(native bool) {
	if e.busy || len(e.queue) == 0 || (len(e.holds) > 0 && !native) {
		return
	}
	w := e.queue[0]
	e.queue[0] = nil
	e.queue = e.queue[1:]
	if len(e.queue) == 0 {
		e.queue = nil
	}
	e.busy, e.trying = true, !native
	w.head = true
	w.ready <- struct{}{}
}

// admit returns a pass for one attempt of l on name: at once when nobody of
// l is at the server, else after waiting locally (wait: a blocking
// Acquire) or for a sibling's try (TryAcquire). It returns an error
// wrapping ErrNotAcquired when TryAcquire can tell without the server that
// the lock is taken, ctx.Err() when ctx ends, ErrClosed when l closes.
func (l *Locker) admit(ctx context.Context, op, name string, wait bool) (gatePass, error) {
	s := l.gates.shard(name)
	native := l.blocker != nil
	s.mu.Lock()
	e := s.entryLocked(name)
	if wait {
		if !e.busy && len(e.queue) == 0 && (len(e.holds) == 0 || native) {
			e.busy, e.trying = true, !native
			s.mu.Unlock()
			return gatePass{s, e}, nil
		}
		w := &gateWaiter{ready: make(chan struct{}, 1)}
		e.queue = append(e.queue, w)
		s.mu.Unlock()
		var err error
		select {
		case <-w.ready:
			select {
			case <-l.closing: // made the head by Close's ending of a hold
				err = fmt.Errorf("dlock: %s %q: %w", op, name, ErrClosed)
			default:
				return gatePass{s, e}, nil
			}
		case <-ctx.Done():
			err = ctx.Err()
		case <-l.closing:
			err = fmt.Errorf("dlock: %s %q: %w", op, name, ErrClosed)
		}
		s.mu.Lock()
		if w.head {
			// Made the head as we gave up: pass it on.
			e.busy, e.trying = false, false
			e.changedLocked()
			e.advanceLocked(native)
		} else if i := indexOf(e.queue, w); i >= 0 {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
		}
		s.unrefLocked(e)
		s.mu.Unlock()
		return gatePass{}, err
	}
	for {
		var live *hold
		var refuse string
		var change <-chan struct{}
		switch {
		case len(e.holds) > 0:
			live = e.holds[0]
		case e.busy && !e.trying:
			refuse = "this Locker is waiting for it"
		case e.busy:
			change = e.changeLocked()
		default:
			e.busy, e.trying = true, true
			s.mu.Unlock()
			return gatePass{s, e}, nil
		}
		if refuse == "" && live != nil {
			s.mu.Unlock()
			if live.check() == nil {
				refuse = "a lease of this Locker holds it"
				s.mu.Lock()
			} else {
				// Ended (or ending: a release in flight); wait until the
				// gate hears of it.
				s.mu.Lock()
				if indexOf(e.holds, live) >= 0 {
					change = e.changeLocked()
				} else {
					continue
				}
			}
		}
		if refuse != "" {
			s.unrefLocked(e)
			s.mu.Unlock()
			return gatePass{}, fmt.Errorf("dlock: %s %q: %w (%s)", op, name, ErrNotAcquired, refuse)
		}
		s.mu.Unlock()
		var err error
		select {
		case <-change:
		case <-ctx.Done():
			err = ctx.Err()
		case <-l.closing:
			err = fmt.Errorf("dlock: %s %q: %w", op, name, ErrClosed)
		}
		s.mu.Lock()
		if err != nil {
			s.unrefLocked(e)
			s.mu.Unlock()
			return gatePass{}, err
		}
	}
}

func indexOf[T comparable](s []T, x T) int {
	for i, y := range s {
		if y == x {
			return i
		}
	}
	return -1
}

// setTrying marks the head's single try in flight (on) or over (off);
// TryAcquire calls of siblings wait for its outcome.
func (p gatePass) setTrying(on bool) {
	if p.e == nil { // a semaphore's attempt: not gated
		return
	}
	p.s.mu.Lock()
	p.e.trying = on
	if !on {
		p.e.changedLocked()
	}
	p.s.mu.Unlock()
}

// finish ends the pass: h is the hold it was granted, whose h.gate is p
// (the pass's reference moves to the hold, which ungate gives back), or nil.
func (p gatePass) finish(h *hold, native bool) {
	s, e := p.s, p.e
	if e == nil { // a semaphore's attempt: not gated
		return
	}
	s.mu.Lock()
	e.busy, e.trying = false, false
	if h != nil {
		e.holds = append(e.holds, h)
	}
	e.changedLocked()
	e.advanceLocked(native)
	if h == nil {
		s.unrefLocked(e) // last: it may recycle e
	}
	s.mu.Unlock()
}

// ungate tells the gate that h no longer holds its name on the server (its
// release returned, or it was lost or expired): the next local waiter may
// go to the server. Idempotent: the first call takes h's pass (under h.mu),
// later ones find none, so none touches an entry recycled since.
func (h *hold) ungate() {
	h.mu.Lock()
	p := h.gate
	h.gate = gatePass{}
	h.mu.Unlock()
	s, e := p.s, p.e
	if e == nil {
		return
	}
	s.mu.Lock()
	if i := indexOf(e.holds, h); i >= 0 {
		last := len(e.holds) - 1
		e.holds[i] = e.holds[last]
		e.holds[last] = nil
		e.holds = e.holds[:last]
		e.changedLocked()
		e.advanceLocked(h.l.blocker != nil)
		s.unrefLocked(e) // last: it may recycle e
	}
	s.mu.Unlock()
}
