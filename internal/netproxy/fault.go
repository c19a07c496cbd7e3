package netproxy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Mode is how Cut cuts a proxy's connections.
type Mode string

const (
	// Silent drops every byte both ways and keeps every socket open, even
	// one whose peer closes its end: nothing crosses, not even a FIN, as
	// across a network partition. New connections are accepted (and
	// their upstream dialled) and black-holed the same way.
	Silent Mode = "silent"
	// Drop drops every byte both ways like Silent, except that a peer's
	// close still closes the other side: a client that gives up on its
	// connection still tells the server. (This is toxiproxy's timeout
	// toxic, which the faults suite's silent partitions always were.)
	Drop Mode = "drop"
	// Reset resets (TCP RST to both peers) every connection, open or new,
	// as soon as its client sends a byte while the cut lasts; that byte is
	// not forwarded. Until then replies still flow, so a client learns of
	// the cut when it next speaks, and the server at the same moment.
	// (This is toxiproxy's reset_peer toxic on the upstream stream.)
	Reset Mode = "reset"
)

// ReplyGrace is how long LoseReply lets the server act on the matched
// request before it closes the connection.
const ReplyGrace = 100 * time.Millisecond

// faults is a Proxy's fault state, guarded by Proxy.mu.
type faults struct {
	cuts       []*Mode    // active cuts, each its own pointer
	latencies  []*latency // active delays; they add up
	latencyGen int        // bumped when latencies change
	losing     int        // active LoseReplies windows
	paused     bool
	arm        *armed // the pending LoseReply
}

type latency struct{ d, jitter time.Duration }

// armed is a pending LoseReply.
type armed struct {
	match func(req []byte) bool
	lost  chan struct{} // closed once the matched request was forwarded
}

// Cut cuts every connection, open or new, as mode says, until heal is
// called. Healing a Silent or Drop cut closes every connection open at
// that moment: bytes were dropped, so their streams cannot go on. heal is
// idempotent. Cut panics on an unknown mode.
func (p *Proxy) Cut(mode Mode) (heal func()) {
	switch mode {
	case Silent, Drop, Reset:
	default:
		panic(fmt.Sprintf("netproxy: unknown cut mode %q", mode))
	}
	k := &mode
	return p.apply(func() { p.cuts = append(p.cuts, k) }, func() []*conn {
		p.cuts = slices.DeleteFunc(p.cuts, func(m *Mode) bool { return m == k })
		if mode == Reset {
			return nil
		}
		return p.doom()
	})
}

// apply changes the fault state with do, under p.mu, and wakes the
// writers; the heal it returns (idempotent) undoes it the same way and
// closes the connections undo returns.
func (p *Proxy) apply(do func(), undo func() []*conn) (heal func()) {
	p.mu.Lock()
	do()
	p.bump()
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			cs := undo()
			p.bump()
			p.mu.Unlock()
			closeAll(cs)
		})
	}
}

// Latency delays every byte from the upstream (the replies) by d ± jitter
// (uniform, drawn per chunk, at least 0), counted from the moment the
// proxy read it; order is kept. Delays of overlapping calls add up. heal
// (idempotent) ends it: bytes still held are delivered at once.
func (p *Proxy) Latency(d, jitter time.Duration) (heal func()) {
	l := &latency{d: d, jitter: jitter}
	return p.apply(func() {
		p.latencies = append(p.latencies, l)
		p.latencyGen++
	}, func() []*conn {
		p.latencies = slices.DeleteFunc(p.latencies, func(x *latency) bool { return x == l })
		p.latencyGen++
		return nil
	})
}

// LoseReplies drops every byte from the upstream for after; then it
// closes every connection (their streams lost bytes) and new connections
// are clean again. Requests still reach the server: called just before a
// request, it loses that request's reply although the server acted on it.
func (p *Proxy) LoseReplies(after time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.losing++
	p.bump()
	p.spawn(func() {
		t := time.NewTimer(after)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.done:
			return
		}
		p.mu.Lock()
		p.losing--
		cs := p.doom()
		p.bump()
		p.mu.Unlock()
		closeAll(cs)
	})
}

// LoseReply arms the proxy: the next request from a client for which
// match reports true (a whole frame after Frame, otherwise whatever one
// read returned) is forwarded to the server, nothing the server sends
// after it reaches that client, and ReplyGrace later both sides of that
// connection are closed. The returned channel is closed once the request
// was forwarded. match may be called from several goroutines at once. A
// later call replaces a pending one (whose channel then never closes).
func (p *Proxy) LoseReply(match func(req []byte) bool) <-chan struct{} {
	a := &armed{match: match, lost: make(chan struct{})}
	p.mu.Lock()
	p.arm = a
	p.mu.Unlock()
	return a.lost
}

// take reports whether req fires a, which it then disarms, muting c
// before the server can answer.
func (a *armed) take(p *Proxy, c *conn, req []byte) bool {
	if !a.match(req) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.arm != a {
		return false
	}
	p.arm = nil
	c.muted = true
	return true
}

// Pause holds every byte both ways, on open and new connections, until
// Resume delivers them in order. A peer's close is not held: it closes
// the other side at once, and bytes still held for it are lost.
func (p *Proxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.bump()
	p.mu.Unlock()
}

// Resume ends a Pause.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.bump()
	p.mu.Unlock()
}

// cutMode is the cut in force: Silent before Drop before Reset, "" when
// none. p.mu is held.
func (p *Proxy) cutMode() Mode {
	var m Mode
	for _, k := range p.cuts {
		switch {
		case *k == Silent:
			return Silent
		case *k == Drop:
			m = Drop
		case m == "":
			m = *k
		}
	}
	return m
}

// holdsCloses reports whether a peer's close must not cross. p.mu is held.
func (p *Proxy) holdsCloses() bool { return p.cutMode() == Silent }

// drawDelay draws the delay of one chunk from the upstream. p.mu is held.
func (p *Proxy) drawDelay() time.Duration {
	var d, jitter time.Duration
	for _, l := range p.latencies {
		d += l.d
		jitter += l.jitter
	}
	if jitter > 0 {
		d += rand.N(2*jitter) - jitter
	}
	return max(d, 0)
}

// doom marks every open connection to drop all its bytes from now on and
// returns them, for the caller to close once it released p.mu (a writer
// that sees the new state first must not deliver a stale byte). p.mu is
// held.
func (p *Proxy) doom() []*conn {
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		c.doomed = true
		cs = append(cs, c)
	}
	return cs
}

func closeAll(cs []*conn) {
	for _, c := range cs {
		c.close(false)
	}
}
