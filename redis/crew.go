package redis

import (
	"sync"
	"sync/atomic"
)

// crew runs Redlock's calls to its nodes on goroutines kept between
// calls. A goroutine started for each call grows its stack, in several
// copies, down go-redis's call path: about a quarter of the client's CPU
// in a Redlock acquire+release over 3 nodes (pprof: runtime.copystack),
// which is what a client pinned to its CPU waits for. A member of the
// crew keeps its grown stack from one call to the next; a call that finds
// no member idle starts one, and members beyond keep end after their call
// (a burst of concurrent attempts leaves no more than keep behind).
type crew struct {
	calls   chan func() // unbuffered: a send is taken only by an idle member
	quit    chan struct{}
	stop    sync.Once
	members atomic.Int32
	started atomic.Int64 // members ever started (tests read it)
	keep    int32
}

func newCrew(keep int) *crew {
	return &crew{calls: make(chan func()), quit: make(chan struct{}), keep: int32(keep)}
}

// run runs f on an idle member, or on a new one.
func (c *crew) run(f func()) {
	select {
	case c.calls <- f:
		return
	default:
	}
	c.members.Add(1)
	c.started.Add(1)
	go c.member(f)
}

func (c *crew) member(f func()) {
	for {
		f()
		if c.leave() {
			return
		}
		select {
		case f = <-c.calls:
		case <-c.quit:
			c.members.Add(-1)
			return
		}
	}
}

// leave reports whether a member that finished its call ends (one of
// more than keep), and counts it out if so.
func (c *crew) leave() bool {
	for n := c.members.Load(); n > c.keep; n = c.members.Load() {
		if c.members.CompareAndSwap(n, n-1) {
			return true
		}
	}
	return false
}

// close ends the idle members; a member in a call ends after it. A call
// run after close ends its member when it returns.
func (c *crew) close() { c.stop.Do(func() { close(c.quit) }) }
