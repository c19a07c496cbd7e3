package zookeeper

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is a TCP proxy between a client and a real ZooKeeper server, for
// network faults: it can stall all traffic (pause) and drop the reply of
// one create (the server still applies it). It is not a mock: every
// request reaches the real server, which answers it.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  []net.Conn
	gate   chan struct{} // closed while traffic flows; replaced by pause
	marker []byte        // drop the reply of the next create/multi containing it

	dropped atomic.Int32
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, gate: make(chan struct{})}
	close(p.gate)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) close() {
	_ = p.ln.Close()
	p.resume()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

func (p *proxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

func (p *proxy) wait() {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	<-g
}

// dropCreateReply arms the proxy: the next create or multi request whose
// bytes contain marker is forwarded, then the connection is cut before the
// reply can reach the client.
func (p *proxy) dropCreateReply(marker string) {
	p.mu.Lock()
	p.marker = []byte(marker)
	p.mu.Unlock()
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		var drop atomic.Bool
		go p.clientToServer(c, s, &drop)
		go p.serverToClient(s, c, &drop)
	}
}

// clientToServer forwards packet by packet (4-byte length + body).
func (p *proxy) clientToServer(c, s net.Conn, drop *atomic.Bool) {
	defer c.Close()
	defer s.Close()
	first := true
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		p.wait()
		cut := false
		if !first && len(body) >= 8 {
			op := int32(binary.BigEndian.Uint32(body[4:8]))
			p.mu.Lock()
			if len(p.marker) > 0 && (op == 1 || op == 15 || op == 14) && bytes.Contains(body, p.marker) {
				p.marker = nil
				cut = true
				drop.Store(true) // before the server can answer
			}
			p.mu.Unlock()
		}
		first = false
		if _, err := s.Write(append(hdr[:], body...)); err != nil {
			return
		}
		if cut {
			// Let the server apply it, then cut both sides: the reply is lost.
			time.Sleep(100 * time.Millisecond)
			p.dropped.Add(1)
			return
		}
	}
}

func (p *proxy) serverToClient(s, c net.Conn, drop *atomic.Bool) {
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			p.wait()
			if drop.Load() {
				return
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
