package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// CutMode is how a client is cut off from its server.
type CutMode string

const (
	// CutSilent drops every byte in both directions and leaves the
	// connections open (a partition: the client sees only timeouts).
	CutSilent CutMode = "silent"
	// CutReset resets every connection (TCP RST) as soon as data flows,
	// and every new one, while the cut lasts.
	CutReset CutMode = "reset"
)

// Proxies is the set of in-process TCP proxies (toxiproxy, in process)
// between one client process and every server it talks to: one proxy per
// server address. The parent owns them, so it can cut a client off, delay
// it, or lose its replies, without touching the client.
type Proxies struct {
	srv *toxiproxy.ApiServer

	mu      sync.Mutex
	proxies []*toxiproxy.Proxy
	n       int // toxic names
}

var (
	apiOnce sync.Once
	apiSrv  *toxiproxy.ApiServer
)

// api returns the process-wide toxiproxy server object (never listening on
// HTTP: only its proxy collection and a private metrics registry are used).
func api() *toxiproxy.ApiServer {
	apiOnce.Do(func() {
		apiSrv = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	})
	return apiSrv
}

// NewProxies starts one loopback proxy per upstream address ("host:port").
func NewProxies(name string, upstreams []string) (*Proxies, error) {
	ps := &Proxies{srv: api()}
	for i, up := range upstreams {
		p := toxiproxy.NewProxy(ps.srv, fmt.Sprintf("%s-%d", name, i), "127.0.0.1:0", up)
		if err := p.Start(); err != nil {
			ps.Close()
			return nil, fmt.Errorf("faults: proxy to %s: %w", up, err)
		}
		ps.proxies = append(ps.proxies, p)
	}
	return ps, nil
}

// Listen returns the proxy address standing for upstream address i.
func (ps *Proxies) Listen(i int) string {
	p := ps.proxies[i]
	p.Lock()
	defer p.Unlock()
	return p.Listen
}

// Rewrite replaces every upstream address in url by its proxy's address.
func (ps *Proxies) Rewrite(url string, upstreams []string) string {
	for i, up := range upstreams {
		url = strings.ReplaceAll(url, up, ps.Listen(i))
	}
	return url
}

// Close stops every proxy and closes its connections.
func (ps *Proxies) Close() {
	for _, p := range ps.proxies {
		p.Stop()
	}
}

// addAll adds one toxic to every proxy (or only to proxy only, when only >= 0)
// and returns a function removing it.
func (ps *Proxies) addAll(only int, typ, stream string, attrs string) (remove func(), err error) {
	ps.mu.Lock()
	ps.n++
	name := fmt.Sprintf("%s_%s_%d", typ, stream, ps.n)
	ps.mu.Unlock()
	var added []*toxiproxy.Proxy
	remove = func() {
		for _, p := range added {
			_ = p.Toxics.RemoveToxic(context.Background(), name)
		}
	}
	for i, p := range ps.proxies {
		if only >= 0 && i != only {
			continue
		}
		js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			remove()
			return nil, fmt.Errorf("faults: add %s toxic: %w", typ, err)
		}
		added = append(added, p)
	}
	return remove, nil
}

// Cut cuts the client off from every server (or only from server only,
// when only >= 0) until the returned function is called.
func (ps *Proxies) Cut(mode CutMode, only int) (heal func(), err error) {
	switch mode {
	case CutSilent:
		up, err := ps.addAll(only, "timeout", "upstream", `{"timeout":0}`)
		if err != nil {
			return nil, err
		}
		down, err := ps.addAll(only, "timeout", "downstream", `{"timeout":0}`)
		if err != nil {
			up()
			return nil, err
		}
		// A partition long enough to be noticed kills the connections it
		// cut (TCP gives up); the bytes dropped meanwhile would desync
		// them anyway. Healing therefore closes them too.
		return func() {
			down()
			up()
			ps.reconnect(only)
		}, nil
	case CutReset:
		return ps.addAll(only, "reset_peer", "upstream", `{"timeout":0}`)
	}
	return nil, fmt.Errorf("faults: unknown cut mode %q", mode)
}

// reconnect closes every connection of proxy only (all when only < 0).
func (ps *Proxies) reconnect(only int) {
	for i, p := range ps.proxies {
		if only >= 0 && i != only {
			continue
		}
		p.Stop()
		_ = p.Start() // same address; it was free a moment ago
	}
}

// Latency delays every byte from the servers by d (± jitter) until the
// returned function is called.
func (ps *Proxies) Latency(d, jitter time.Duration) (heal func(), err error) {
	return ps.addAll(-1, "latency", "downstream",
		fmt.Sprintf(`{"latency":%d,"jitter":%d}`, d.Milliseconds(), jitter.Milliseconds()))
}

// LoseReplies drops every reply from the servers from now on and closes the
// client's connections after `after`; new connections are clean again once
// the connections closed. Called just before a request, it loses that
// request's reply although the server executed it.
func (ps *Proxies) LoseReplies(after time.Duration) error {
	remove, err := ps.addAll(-1, "timeout", "downstream", fmt.Sprintf(`{"timeout":%d}`, after.Milliseconds()))
	if err != nil {
		return err
	}
	time.AfterFunc(after+20*time.Millisecond, remove)
	return nil
}

// Redirect points proxy i at another upstream (a promoted replica): its
// open connections are closed and new ones go to addr.
func (ps *Proxies) Redirect(i int, addr string) error {
	p := ps.proxies[i]
	p.Stop()
	p.Lock()
	p.Upstream = addr
	p.Unlock()
	if err := p.Start(); err != nil {
		return fmt.Errorf("faults: redirect proxy to %s: %w", addr, err)
	}
	return nil
}
