package netproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echo is a real loopback TCP server: it answers every line with the same
// line, reports each line it received and each connection it accepted.
type echo struct {
	addr  string
	lines chan string
	conns chan *peer
}

// peer is the server's side of one connection.
type peer struct {
	net.Conn
	ended chan error // receives the error that ended its reads
}

func newEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{addr: ln.Addr().String(), lines: make(chan string, 100), conns: make(chan *peer, 100)}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p := &peer{Conn: c, ended: make(chan error, 1)}
			t.Cleanup(func() { c.Close() })
			e.conns <- p
			go func() {
				r := bufio.NewReader(c)
				for {
					s, err := r.ReadString('\n')
					if err != nil {
						p.ended <- err
						return
					}
					e.lines <- s
					if _, err := io.WriteString(c, s); err != nil {
						p.ended <- err
						return
					}
				}
			}()
		}
	}()
	return e
}

// line waits for the server to receive a line.
func (e *echo) line(t *testing.T, want string) {
	t.Helper()
	select {
	case s := <-e.lines:
		if s != want {
			t.Fatalf("the server received %q, want %q", s, want)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("the server never received %q", want)
	}
}

// next waits for the next line the server receives.
func (e *echo) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-e.lines:
		return s
	case <-time.After(2 * time.Second):
		t.Fatal("the server received no line")
		return ""
	}
}

// none checks that the server receives no line for d.
func (e *echo) none(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case s := <-e.lines:
		t.Fatalf("%s: the server received %q", why, s)
	case <-time.After(d):
	}
}

// accepted returns the server's side of the next connection.
func (e *echo) accepted(t *testing.T) *peer {
	t.Helper()
	select {
	case p := <-e.conns:
		return p
	case <-time.After(2 * time.Second):
		t.Fatal("the server accepted no connection")
		return nil
	}
}

type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{Conn: c, r: bufio.NewReader(c)}
}

// send writes s and reads one line back within d.
func (c *client) send(s string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, s); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}

// ok checks a clean round trip.
func (c *client) ok(t *testing.T, e *echo, s string) {
	t.Helper()
	if got, err := c.send(s, 2*time.Second); err != nil || got != s {
		t.Fatalf("round trip of %q: %q, %v", s, got, err)
	}
	e.line(t, s)
}

// twoConns starts an echo server behind a proxy with two connections
// through it that have each echoed a line: c (cp its server end) and
// quitter (qp), which a test closes on one side.
func twoConns(t *testing.T) (e *echo, p *Proxy, c *client, cp *peer, quitter *client, qp *peer) {
	t.Helper()
	e = newEcho(t)
	p = newProxy(t, e.addr)
	c = dial(t, p.Addr())
	c.ok(t, e, "a\n")
	cp = e.accepted(t)
	quitter = dial(t, p.Addr())
	quitter.ok(t, e, "q\n")
	qp = e.accepted(t)
	return e, p, c, cp, quitter, qp
}

func newProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// closedWithin waits up to d for the end of p's reads and reports its error.
func (p *peer) closedWithin(d time.Duration) (error, bool) {
	select {
	case err := <-p.ended:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

func TestForwardAndClose(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr)
	c := dial(t, p.Addr())
	c.ok(t, e, "a\n")
	sp := e.accepted(t)
	// A client's close reaches the server.
	c.Close()
	if err, ok := sp.closedWithin(2 * time.Second); !ok || err != io.EOF {
		t.Fatalf("the server's side after the client closed: %v (ended %v), want EOF", err, ok)
	}
	c2 := dial(t, p.Addr())
	c2.ok(t, e, "b\n")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.send("c\n", 2*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("a connection after Close: %v, want it closed", err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("a dial after Close was accepted")
	}
}

// TestCloseEndsEverything: Close returns, with every goroutine of the
// proxy ended, whatever faults are in force.
func TestCloseEndsEverything(t *testing.T) {
	e := newEcho(t)
	before := runtime.NumGoroutine()
	p, err := New(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	held := dial(t, p.Addr())
	held.ok(t, e, "x\n")
	p.Cut(Silent)
	p.Pause()
	p.Latency(time.Hour, 0)
	p.LoseReplies(time.Hour)
	p.LoseReply(func([]byte) bool { return true })
	for range 3 {
		c := dial(t, p.Addr())
		_, _ = io.WriteString(c, "y\n")
	}
	_, _ = io.WriteString(held, "z\n")
	time.Sleep(100 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	// The echo server's goroutines end as the proxy closed their
	// connections; the proxy's own are gone already.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+2 { // this test's two watchers at most
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before, %d after Close:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSilent(t *testing.T) {
	e, p, c, sp, quitter, qp := twoConns(t)

	heal := p.Cut(Silent)
	if _, err := c.send("b\n", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("silent cut: want a timeout, got %v", err)
	}
	e.none(t, 100*time.Millisecond, "silent cut")
	// Server to client: nothing either.
	_, _ = io.WriteString(sp, "push\n")
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if s, err := c.r.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("silent cut: the client received %q, %v", s, err)
	}
	// A FIN does not cross: the server's side stays open.
	quitter.Close()
	if err, ended := qp.closedWithin(300 * time.Millisecond); ended {
		t.Fatalf("silent cut: the client's close reached the server (%v)", err)
	}
	// New connections are accepted, and black-holed.
	n := dial(t, p.Addr())
	if _, err := n.send("n\n", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a new connection during a silent cut: want a timeout, got %v", err)
	}
	e.none(t, 100*time.Millisecond, "new connection during a silent cut")

	heal()
	heal() // idempotent
	// The cut connections are closed: their streams lost bytes.
	if _, err := c.send("c\n", 2*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("a connection cut silently after the heal: %v, want it closed", err)
	}
	if _, ended := qp.closedWithin(2 * time.Second); !ended {
		t.Fatal("after the heal the half-closed connection is still open on the server")
	}
	dial(t, p.Addr()).ok(t, e, "d\n")
}

func TestDrop(t *testing.T) {
	e, p, c, _, quitter, qp := twoConns(t)

	heal := p.Cut(Drop)
	if _, err := c.send("b\n", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("drop cut: want a timeout, got %v", err)
	}
	e.none(t, 100*time.Millisecond, "drop cut")
	// Unlike Silent, a peer's close crosses.
	quitter.Close()
	if err, ended := qp.closedWithin(2 * time.Second); !ended || err != io.EOF {
		t.Fatalf("drop cut: the server's side after the client closed: %v (ended %v), want EOF", err, ended)
	}
	heal()
	if _, err := c.send("c\n", 2*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("a connection cut after the heal: %v, want it closed", err)
	}
	dial(t, p.Addr()).ok(t, e, "d\n")
}

func TestReset(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr)
	c := dial(t, p.Addr())
	c.ok(t, e, "a\n")
	sp := e.accepted(t)
	idle := dial(t, p.Addr())
	idle.ok(t, e, "i\n")
	ip := e.accepted(t)

	heal := p.Cut(Reset)
	// Until the client speaks, replies flow.
	_, _ = io.WriteString(sp, "push\n")
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if s, err := c.r.ReadString('\n'); err != nil || s != "push\n" {
		t.Fatalf("reset cut, before the client spoke: %q, %v", s, err)
	}
	if _, err := c.send("b\n", 2*time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reset cut: want ECONNRESET, got %v", err)
	}
	e.none(t, 100*time.Millisecond, "reset cut")
	if err, ended := sp.closedWithin(2 * time.Second); !ended || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reset cut: the server's side: %v (ended %v), want ECONNRESET", err, ended)
	}
	// A new connection is reset as soon as it speaks.
	n := dial(t, p.Addr())
	if _, err := n.send("n\n", 2*time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a new connection during a reset cut: want ECONNRESET, got %v", err)
	}
	e.none(t, 100*time.Millisecond, "new connection during a reset cut")
	heal()
	heal()
	// A connection that stayed quiet lives on; new ones work.
	idle.ok(t, e, "j\n")
	if _, ended := ip.closedWithin(0); ended {
		t.Fatal("the quiet connection was closed")
	}
	dial(t, p.Addr()).ok(t, e, "d\n")
}

func TestLatency(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr)
	c := dial(t, p.Addr())
	c.ok(t, e, "a\n")
	const d, jitter = 300 * time.Millisecond, 100 * time.Millisecond
	heal := p.Latency(d, jitter)
	for i := range 5 {
		start := time.Now()
		if _, err := c.send("b\n", 3*time.Second); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		e.line(t, "b\n")
		// The request is not delayed: the server has it at once.
		if took < d-jitter || took > d+jitter+150*time.Millisecond {
			t.Fatalf("round trip %d under latency %v±%v took %v", i, d, jitter, took)
		}
	}
	// Heal delivers what is held at once.
	p2 := p.Latency(time.Hour, 0)
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "h\n"); err != nil {
		t.Fatal(err)
	}
	e.line(t, "h\n")
	heal()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	p2()
	if s, err := c.r.ReadString('\n'); err != nil || s != "h\n" {
		t.Fatalf("after the heal: %q, %v", s, err)
	}
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Fatalf("the held reply came %v after the heal", took)
	}
	start = time.Now()
	c.ok(t, e, "c\n")
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Fatalf("a round trip after the heal took %v", took)
	}
}

func TestLoseReplies(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr)
	c := dial(t, p.Addr())
	c.ok(t, e, "a\n")
	const after = 300 * time.Millisecond
	start := time.Now()
	p.LoseReplies(after)
	_, err := c.send("b\n", 3*time.Second)
	took := time.Since(start)
	if err == nil || isTimeout(err) {
		t.Fatalf("lost reply: %v, want the connection closed", err)
	}
	if took < after-20*time.Millisecond || took > after+500*time.Millisecond {
		t.Fatalf("lost reply: the connection closed after %v, want about %v", took, after)
	}
	e.line(t, "b\n") // the server acted
	dial(t, p.Addr()).ok(t, e, "c\n")
}

func TestLoseReply(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.addr)
	p.Frame(bufio.ScanLines) // a frame is a line, "\n" included
	c := dial(t, p.Addr())
	var seen []string
	lost := p.LoseReply(func(req []byte) bool {
		seen = append(seen, string(req)) // one connection: one goroutine
		return bytes.HasPrefix(req, []byte("create "))
	})
	// Two requests in one write: framed, neither matches.
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "get x\nget create \n"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"get x\n", "get create \n"} {
		if s, err := c.r.ReadString('\n'); err != nil || s != want {
			t.Fatalf("the replies before the matched request: %q, %v; want %q", s, err, want)
		}
		e.line(t, want)
	}
	select {
	case <-lost:
		t.Fatal("LoseReply fired on a request that does not match")
	default:
	}
	start := time.Now()
	if s, err := c.send("create x\n", 3*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("the matched request's reply: %q, %v; want the connection closed", s, err)
	}
	if took := time.Since(start); took < ReplyGrace-20*time.Millisecond {
		t.Fatalf("closed %v after the request, before the grace %v", took, ReplyGrace)
	}
	e.line(t, "create x\n") // the server acted
	select {
	case <-lost:
	default:
		t.Fatal("the lost channel is open after the reply was lost")
	}
	if strings.Join(seen, "|") != "get x\n|get create \n|create x\n" {
		t.Fatalf("match saw %q, want the two whole frames", seen)
	}
	// It fired once: the next match goes through.
	dial(t, p.Addr()).ok(t, e, "create y\n")
}

func TestPause(t *testing.T) {
	e, p, c, _, quitter, qp := twoConns(t)

	p.Pause()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	for _, s := range []string{"b\n", "c\n"} {
		if _, err := io.WriteString(c, s); err != nil {
			t.Fatal(err)
		}
	}
	n := dial(t, p.Addr())
	_ = n.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(n, "n\n"); err != nil {
		t.Fatal(err)
	}
	e.none(t, 300*time.Millisecond, "paused")
	// A close is not held, even behind held bytes (which are lost).
	if _, err := io.WriteString(quitter, "lost\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	quitter.Close()
	if err, ended := qp.closedWithin(2 * time.Second); !ended || err != io.EOF {
		t.Fatalf("paused: the server's side after the client closed: %v (ended %v), want EOF", err, ended)
	}
	p.Resume()
	for _, want := range []string{"b\n", "c\n"} {
		if s, err := c.r.ReadString('\n'); err != nil || s != want {
			t.Fatalf("after Resume: %q, %v; want %q", s, err, want)
		}
	}
	if s, err := n.r.ReadString('\n'); err != nil || s != "n\n" {
		t.Fatalf("the connection made while paused, after Resume: %q, %v", s, err)
	}
	got := []string{e.next(t), e.next(t), e.next(t)}
	if g := strings.Join(got, ""); g != "b\nc\nn\n" && g != "n\nb\nc\n" && g != "b\nn\nc\n" {
		t.Fatalf("the server received %q after Resume", got)
	}
	c.ok(t, e, "d\n")
}

func TestRedirect(t *testing.T) {
	e1, e2 := newEcho(t), newEcho(t)
	p := newProxy(t, e1.addr)
	c := dial(t, p.Addr())
	c.ok(t, e1, "a\n")
	p.Redirect(e2.addr)
	if _, err := c.send("b\n", 2*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("an open connection after Redirect: %v, want it closed", err)
	}
	dial(t, p.Addr()).ok(t, e2, "c\n")
	e1.none(t, 100*time.Millisecond, "after Redirect, the old upstream")
}

func TestSet(t *testing.T) {
	e1, e2 := newEcho(t), newEcho(t)
	s, err := NewSet([]string{e1.addr, e2.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := "redis://" + e1.addr + "," + e2.addr + "/0?x=" + e1.addr
	want := "redis://" + s.Proxy(0).Addr() + "," + s.Proxy(1).Addr() + "/0?x=" + s.Proxy(0).Addr()
	if got := s.Rewrite(url); got != want {
		t.Fatalf("Rewrite(%q) = %q, want %q", url, got, want)
	}
	dial(t, s.Proxy(0).Addr()).ok(t, e1, "a\n")
	dial(t, s.Proxy(1).Addr()).ok(t, e2, "b\n")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range s.Len() {
		if c, err := net.DialTimeout("tcp", s.Proxy(i).Addr(), time.Second); err == nil {
			c.Close()
			t.Fatalf("proxy %d accepted a dial after the set's Close", i)
		}
	}
}

func TestReplaceAddrs(t *testing.T) {
	for _, c := range []struct {
		in       string
		from, to []string
		want     string
	}{
		{"zk://h:1,h:2/p", []string{"h:1", "h:2"}, []string{"p:7", "p:8"}, "zk://p:7,p:8/p"},
		{"a 127.0.0.1:80 127.0.0.1:8080", []string{"127.0.0.1:80"}, []string{"X"}, "a X 127.0.0.1:8080"},
		{"110.0.0.1:80 10.0.0.1:80", []string{"10.0.0.1:80"}, []string{"X"}, "110.0.0.1:80 X"},
		// a replacement is not replaced again
		{"h:1 h:2", []string{"h:1", "h:2"}, []string{"h:2", "h:1"}, "h:2 h:1"},
		// the longest address wins
		{"h:1/h:12", []string{"h:1", "h:12"}, []string{"A", "B"}, "A/B"},
	} {
		if got := ReplaceAddrs(c.in, c.from, c.to); got != c.want {
			t.Errorf("ReplaceAddrs(%q, %q, %q) = %q, want %q", c.in, c.from, c.to, got, c.want)
		}
	}
}
