// Package netproxy is the project's one TCP proxy for tests: a loopback
// listener that forwards each connection to an upstream server, and that
// a test can cut (silently or with resets), slow down, pause, redirect, or
// make lose the replies to a request, without touching the client or the
// server. Every request still reaches a real server: it is a network
// fault, not a mock.
//
// The conformance harnesses' Disconnect, the ZooKeeper fault tests and
// the faults suite all use it; it depends on nothing outside the standard
// library, so the library's go.mod stays free of proxy dependencies.
//
// Each connection is two pipes (client to server, server to client), each
// a reader and a writer goroutine with a queue between them. The reader
// stamps every chunk with the time it was read; the writer applies the
// proxy's fault state at the moment it would deliver the chunk. Close
// waits for every goroutine.
package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// queued is how many chunks a pipe holds between its reader and its
// writer (toxiproxy's latency toxic holds as many): a delayed or paused
// pipe keeps reading up to this, then TCP pushes back.
const queued = 1024

// maxFrame bounds one frame cut by a Frame split function.
const maxFrame = 16 << 20

// Proxy forwards every connection made to Addr to its upstream address.
type Proxy struct {
	ln     net.Listener
	done   chan struct{} // closed by Close
	ctx    context.Context
	cancel context.CancelFunc // cancels dials in flight
	wg     sync.WaitGroup     // every goroutine; Close waits for them

	mu       sync.Mutex
	closed   bool
	upstream string
	split    bufio.SplitFunc
	conns    map[*conn]struct{}
	// changed is closed and replaced at every change of the fault state,
	// to wake the writers waiting on it.
	changed chan struct{}
	faults  // guarded by mu
}

// New listens on a free loopback port and forwards each connection to
// upstream ("host:port"), dialled when the connection is accepted.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:       ln,
		done:     make(chan struct{}),
		ctx:      ctx,
		cancel:   cancel,
		upstream: upstream,
		conns:    make(map[*conn]struct{}),
		changed:  make(chan struct{}),
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's "host:port", which clients dial instead of the
// upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close closes the listener, so that later dials are refused, and every
// connection, and returns once every goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	p.closeConns()
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("netproxy: close: %w", err)
	}
	return nil
}

// Redirect points the proxy at another upstream (a promoted replica): its
// open connections are closed, and new ones go to upstream. The listener
// stays open, so the clients reconnect through the same address.
func (p *Proxy) Redirect(upstream string) {
	p.mu.Lock()
	p.upstream = upstream
	p.mu.Unlock()
	p.closeConns()
}

// Frame makes the proxy read what clients send one frame at a time, as
// split cuts it (a length-prefixed packet, a line), so that a LoseReply
// match sees whole requests: a frame is every byte split consumed (the
// token it returns is ignored), forwarded once complete. It applies to
// connections accepted after the call.
func (p *Proxy) Frame(split bufio.SplitFunc) {
	p.mu.Lock()
	p.split = split
	p.mu.Unlock()
}

// bump wakes every writer waiting on the fault state. p.mu is held.
func (p *Proxy) bump() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// closeConns closes every open connection.
func (p *Proxy) closeConns() {
	p.mu.Lock()
	cs := p.doom()
	p.mu.Unlock()
	closeAll(cs)
}

// spawn runs f in a goroutine that Close waits for, unless the proxy is
// closed. p.mu is held.
func (p *Proxy) spawn(f func()) bool {
	if p.closed {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond): // a transient error (EMFILE)
				continue
			}
		}
		p.mu.Lock()
		if !p.spawn(func() { p.handle(cc) }) {
			_ = cc.Close()
		}
		p.mu.Unlock()
	}
}

// handle dials the upstream for the accepted client connection cc and
// starts its pipes.
func (p *Proxy) handle(cc net.Conn) {
	p.mu.Lock()
	up, split := p.upstream, p.split
	p.mu.Unlock()
	var d net.Dialer
	sc, err := d.DialContext(p.ctx, "tcp", up)
	if err != nil {
		_ = cc.Close()
		return
	}
	c := &conn{p: p, client: cc, server: sc, done: make(chan struct{})}
	toServer := make(chan chunk, queued)
	toClient := make(chan chunk, queued)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.upstream != up { // closed or redirected while dialling
		_ = cc.Close()
		_ = sc.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.spawn(func() { c.read(cc, toServer, split) })
	p.spawn(func() { c.write(sc, toServer, upstream) })
	p.spawn(func() { c.read(sc, toClient, nil) })
	p.spawn(func() { c.write(cc, toClient, downstream) })
}

// direction is the way a pipe carries bytes.
type direction int

const (
	upstream   direction = iota // client to server: requests
	downstream                  // server to client: replies
)

// chunk is what one read returned (or one frame), stamped with the time
// it was read.
type chunk struct {
	b  []byte
	at time.Time
}

// conn is one client connection and its upstream connection.
type conn struct {
	p              *Proxy
	client, server net.Conn
	done           chan struct{} // closed by close
	once           sync.Once
	// guarded by p.mu
	muted  bool // its replies are being lost (LoseReply)
	doomed bool // it is being closed: nothing more crosses
}

// close closes both sides of c; reset sends a TCP RST to both peers
// instead of a FIN.
func (c *conn) close(reset bool) {
	c.once.Do(func() {
		if reset {
			for _, s := range []net.Conn{c.client, c.server} {
				if tc, ok := s.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
			}
		}
		_ = c.client.Close()
		_ = c.server.Close()
		close(c.done)
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// read copies src into out, chunk by chunk (frame by frame when split is
// set), until src ends.
func (c *conn) read(src net.Conn, out chan<- chunk, split bufio.SplitFunc) {
	defer close(out)
	emit := func(b []byte) bool {
		select {
		case out <- chunk{b: bytes.Clone(b), at: time.Now()}:
			return true
		case <-c.done:
			return false
		}
	}
	if split != nil {
		s := bufio.NewScanner(src)
		s.Buffer(make([]byte, 64<<10), maxFrame)
		s.Split(func(data []byte, atEOF bool) (int, []byte, error) {
			// Forward every byte split consumed, whatever token it cut.
			n, _, err := split(data, atEOF)
			if n > 0 {
				return n, data[:n], err
			}
			return n, nil, err
		})
		for s.Scan() {
			if !emit(s.Bytes()) {
				return
			}
		}
	} else {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !emit(buf[:n]) {
				return
			}
			if err != nil {
				break
			}
		}
	}
	// The peer closed its end (or the connection broke). A pause holds
	// bytes, not closes: the other side is closed now, bytes still held
	// are lost.
	c.p.mu.Lock()
	paused := c.p.paused
	c.p.mu.Unlock()
	if paused {
		c.close(false)
	}
}

// write delivers the chunks of in to dst, as the fault state allows.
func (c *conn) write(dst net.Conn, in <-chan chunk, dir direction) {
	for {
		var ch chunk
		var ok bool
		select {
		case ch, ok = <-in:
		case <-c.done:
			return
		}
		if !ok {
			// The source's peer closed its end: close the other side
			// too (a full close, as every proxy here always did),
			// unless a Silent cut keeps it open.
			c.p.mu.Lock()
			hold := c.p.holdsCloses()
			c.p.mu.Unlock()
			if !hold {
				c.close(false)
			}
			return
		}
		if !c.deliver(dst, ch, dir) {
			return
		}
	}
}

// deliver writes ch to dst when and if the fault state lets it through.
// It returns false when c is closed.
func (c *conn) deliver(dst net.Conn, ch chunk, dir direction) bool {
	p := c.p
	var (
		delay    time.Duration
		drawnFor = -1 // the latency generation delay was drawn for
	)
	for {
		p.mu.Lock()
		changed, paused := p.changed, p.paused
		mode := p.cutMode()
		lose := c.doomed || dir == downstream && (p.losing > 0 || c.muted)
		if dir == downstream && drawnFor != p.latencyGen {
			delay, drawnFor = p.drawDelay(), p.latencyGen
		}
		var arm *armed
		if dir == upstream {
			arm = p.arm
		}
		p.mu.Unlock()

		switch {
		case paused:
			select {
			case <-changed:
				continue
			case <-c.done:
				return false
			}
		case mode == Silent || mode == Drop || lose:
			return true // dropped
		case mode == Reset && dir == upstream:
			c.close(true)
			return false
		}
		if dir == downstream {
			if wait := time.Until(ch.at.Add(delay)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-changed:
				case <-c.done:
				}
				t.Stop()
				continue // the state may have changed meanwhile
			}
		}
		if arm != nil && !arm.take(p, c, ch.b) {
			arm = nil
		}
		if _, err := dst.Write(ch.b); err != nil {
			c.close(false)
			return false
		}
		if arm != nil {
			// The server has the request; give it time to act, then cut
			// both sides: its reply is lost.
			close(arm.lost)
			t := time.NewTimer(ReplyGrace)
			select {
			case <-t.C:
			case <-c.done:
			}
			t.Stop()
			c.close(false)
			return false
		}
		return true
	}
}
