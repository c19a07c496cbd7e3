package redis

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
)

// harness is one conformance namespace: a fresh key prefix on a target.
type harness struct {
	tg     *target
	prefix string
}

func newHarness(tg *target) conformance.Harness {
	h := &harness{tg: tg, prefix: "dlockct:" + strings.ToLower(rand.Text()[:10]) + ":"}
	if tg.addrs == nil {
		return h
	}
	return &cutHarness{harness: h, proxies: map[*dlock.Locker]*proxies{}}
}

func (h *harness) URL() string {
	sep := "?"
	if strings.Contains(h.tg.url, "?") {
		sep = "&"
	}
	return h.tg.url + sep + "prefix=" + h.prefix
}

func (h *harness) NewLocker(ctx context.Context) (*dlock.Locker, error) {
	return dlock.Open(ctx, h.URL())
}

func (h *harness) Close() error { return nil }

// serverFor returns the raw client of each server that stores name's keys.
func (h *harness) serversFor(ctx context.Context, name string) ([]goredis.UniversalClient, error) {
	if cc, ok := h.tg.raw[0].(*goredis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, keysFor(h.prefix, name).lock)
		if err != nil {
			return nil, err
		}
		return []goredis.UniversalClient{m}, nil
	}
	return h.tg.raw, nil
}

// Revoke deletes the lock key on every server, as an eviction or an
// operator would.
func (h *harness) Revoke(ctx context.Context, name string) error {
	n, err := h.tg.del(ctx, keysFor(h.prefix, name).lock)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("redis harness: %q is not held", name)
	}
	return nil
}

// Residue counts what is on the servers for name besides the holder's
// lock key and the fence counter: lock keys with another value than the
// holder's (a Redlock attempt not taken back) and any other key in the
// name's hash tag.
func (h *harness) Residue(ctx context.Context, name string) (int, error) {
	k := keysFor(h.prefix, name)
	servers, err := h.serversFor(ctx, name)
	if err != nil {
		return 0, err
	}
	votes := map[string]int{}
	stray := 0
	for _, c := range servers {
		v, err := c.Get(ctx, k.lock).Result()
		switch {
		case err == goredis.Nil:
		case err != nil:
			return 0, err
		default:
			votes[v]++
		}
		keys, err := c.Keys(ctx, globEscape(k.lock)+"*").Result()
		if err != nil {
			return 0, err
		}
		for _, key := range keys {
			if key != k.lock && key != k.fence {
				stray++
			}
		}
	}
	quorum := len(servers)/2 + 1
	left := stray
	for _, n := range votes {
		if n < quorum {
			left += n
		}
	}
	return left, nil
}

// cutHarness adds Disconnector: each Locker reaches the servers through
// in-process TCP proxies of its own, which Disconnect cuts for good (open
// connections closed, new ones refused). A Cluster has no cutHarness: its
// client learns the nodes' own addresses and would go around the proxies.
// (The faults package's proxies cannot be used: it imports this package.)
type cutHarness struct {
	*harness
	mu      sync.Mutex
	proxies map[*dlock.Locker]*proxies
}

func (h *cutHarness) NewLocker(ctx context.Context) (*dlock.Locker, error) {
	ps, err := newProxies(h.tg.addrs)
	if err != nil {
		return nil, err
	}
	url := h.URL()
	for i, a := range h.tg.addrs {
		url = strings.Replace(url, a, ps.addrs[i], 1)
	}
	l, err := dlock.Open(ctx, url)
	if err != nil {
		ps.Close()
		return nil, err
	}
	h.mu.Lock()
	h.proxies[l] = ps
	h.mu.Unlock()
	return l, nil
}

func (h *cutHarness) Disconnect(ctx context.Context, l *dlock.Locker) error {
	h.mu.Lock()
	ps := h.proxies[l]
	h.mu.Unlock()
	if ps == nil {
		return fmt.Errorf("redis harness: not a Locker of this harness")
	}
	ps.Close()
	return nil
}

// proxies are loopback TCP proxies, one per upstream address.
type proxies struct {
	addrs []string
	lns   []net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxies(upstreams []string) (*proxies, error) {
	ps := &proxies{}
	for _, up := range upstreams {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ps.Close()
			return nil, err
		}
		ps.lns = append(ps.lns, ln)
		ps.addrs = append(ps.addrs, ln.Addr().String())
		go ps.serve(ln, up)
	}
	return ps, nil
}

func (ps *proxies) serve(ln net.Listener, up string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", up)
		if err != nil {
			c.Close()
			continue
		}
		ps.mu.Lock()
		ps.conns = append(ps.conns, c, u)
		ps.mu.Unlock()
		go func() { io.Copy(u, c); u.Close() }()
		go func() { io.Copy(c, u); c.Close() }()
	}
}

// Close refuses new connections and closes the open ones.
func (ps *proxies) Close() {
	for _, ln := range ps.lns {
		ln.Close()
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, c := range ps.conns {
		c.Close()
	}
}

func (h *cutHarness) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ps := range h.proxies {
		ps.Close()
	}
	return nil
}

// globEscape quotes the glob characters of KEYS/SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestConformance runs the suite against a single server, a 3-master
// cluster and Redlock over 3 and 5 nodes (servers shared by the test
// binary, each harness on its own key prefix). The harnesses implement
// Revoker and Residue, and Disconnector except on the cluster; not
// Restarter (tokens are not declared to survive a restart;
// TestRestartWithPersistence covers it).
func TestConformance(t *testing.T) {
	splitVotes := conformance.WithSkip("Redlock promises at most one winner, not exactly one: concurrent attempts on a free name can split the nodes' votes so that none reaches the quorum (each then retries after a random delay)",
		"ConcurrentTryAcquireOneWinner")
	for _, tc := range []struct {
		name string
		mk   func(testing.TB) *target
		opts []conformance.Option
	}{
		{"single", singleTarget, nil},
		{"cluster", clusterTarget, nil},
		{"redlock3", func(t testing.TB) *target { return redlockTarget(t, 3) }, []conformance.Option{splitVotes}},
		{"redlock5", func(t testing.TB) *target { return redlockTarget(t, 5) }, []conformance.Option{splitVotes}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var once sync.Once
			var tg *target
			conformance.Run(t, func(ctx context.Context) (conformance.Harness, error) {
				once.Do(func() { tg = tc.mk(t) })
				return newHarness(tg), nil
			}, append(tc.opts, conformance.WithSlack(time.Second))...)
		})
	}
}
