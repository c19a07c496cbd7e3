package sqltest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/sqllock"
)

// Harness is the conformance harness of a SQL driver. Each Locker
// reaches the server through its own TCP proxy, so that Disconnect can
// cut it as a network failure would: the proxy stops forwarding but keeps
// both sockets open, so the server notices nothing until its idle timeout.
// Revoke ends the holder's session on the server (pg_terminate_backend,
// KILL), or, for the version strategy, clears the lease row.
type Harness struct {
	url, addr string
	admin     *dlock.Locker
	strategy  string

	mu      sync.Mutex
	proxies map[*dlock.Locker]*Proxy
}

var (
	_ conformance.Revoker      = (*Harness)(nil)
	_ conformance.Disconnector = (*Harness)(nil)
	_ conformance.Residue      = (*Harness)(nil)
)

// Maker returns the conformance HarnessMaker for a server: rawURL is its
// URL with the strategy parameter, addr its host:port in that URL.
func Maker(rawURL, addr, strategy string) conformance.HarnessMaker {
	return func(ctx context.Context) (conformance.Harness, error) {
		admin, err := dlock.Open(ctx, rawURL)
		if err != nil {
			return nil, err
		}
		return &Harness{url: rawURL, addr: addr, admin: admin, strategy: strategy, proxies: map[*dlock.Locker]*Proxy{}}, nil
	}
}

// NewLocker opens a client through a new proxy.
func (h *Harness) NewLocker(ctx context.Context) (*dlock.Locker, error) {
	p, err := NewProxy(h.addr)
	if err != nil {
		return nil, err
	}
	l, err := dlock.Open(ctx, strings.Replace(h.url, h.addr, p.Addr(), 1))
	if err != nil {
		p.Close()
		return nil, err
	}
	h.mu.Lock()
	h.proxies[l] = p
	h.mu.Unlock()
	return l, nil
}

// URL is the server's URL, for child processes.
func (h *Harness) URL() string { return h.url }

// Close closes the proxies and the admin client.
func (h *Harness) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.proxies {
		p.Close()
	}
	return h.admin.Close()
}

func (h *Harness) run(ctx context.Context, sql string, args []any, dest ...any) (bool, error) {
	return Exec(ctx, h.admin, []sqllock.Stmt{{SQL: sql, Args: args}}, dest...)
}

func (h *Harness) sql() sqllock.Admin { return AdminSQL(h.admin) }

// Revoke makes the server drop the current lease of name.
func (h *Harness) Revoke(ctx context.Context, name string) error {
	if h.strategy == "version" {
		var ok any
		_, err := h.run(ctx, h.sql().Expire, []any{name}, &ok)
		return err
	}
	var session int64
	script := h.sql().Holder
	stmts := make([]sqllock.Stmt, len(script))
	for i, q := range script {
		stmts[i].SQL = q
	}
	last := &stmts[len(stmts)-1]
	for range max(strings.Count(last.SQL, "?"), 1) { // "?": each is the name
		last.Args = append(last.Args, name)
	}
	found, err := Exec(ctx, h.admin, stmts, &session)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("sqltest: %q has no holder session", name)
	}
	return h.Kill(ctx, session)
}

// Kill ends a server session and waits until it is gone (its locks are
// freed when it ends, a moment after the holder may have learnt of it).
func (h *Harness) Kill(ctx context.Context, session int64) error {
	var ok any
	if _, err := h.run(ctx, h.sql().Kill, []any{session}, &ok); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int64
		if _, err := h.run(ctx, h.sql().Alive, []any{session}, &n); err != nil || n == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sqltest: session %d still alive 5s after it was killed", session)
		}
		time.Sleep(time.Millisecond)
	}
}

// Disconnect cuts l's connections as a network failure would.
func (h *Harness) Disconnect(ctx context.Context, l *dlock.Locker) error {
	h.mu.Lock()
	p := h.proxies[l]
	h.mu.Unlock()
	if p == nil {
		return errors.New("sqltest: not a Locker of this harness")
	}
	p.Cut()
	return nil
}

// Residue counts the sessions queued behind name's holder.
func (h *Harness) Residue(ctx context.Context, name string) (int, error) {
	var n int64
	_, err := h.run(ctx, h.sql().Waiters, []any{name}, &n)
	return int(n), err
}

// Proxy forwards TCP connections to a server until Cut.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target}
	go p.serve()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies until Cut, after which it reads and drops everything: the
// peers' sockets stay open, as behind a dead network.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if !cut {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			// A closed or reset peer closes the other side too, unless
			// cut: then both stay open and silent.
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if !cut {
				dst.Close()
				src.Close()
			}
			return
		}
	}
}

// Cut stops forwarding, and new connections are refused.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.ln.Close()
}

// Close closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// Conformance runs the conformance suite for every strategy.
func Conformance(t *testing.T, rawURL, addr string, strategies []string, opts ...conformance.Option) {
	for _, s := range strategies {
		t.Run(s, func(t *testing.T) {
			conformance.Run(t, Maker(WithParams(rawURL, "strategy", s), addr, s), opts...)
		})
	}
}
