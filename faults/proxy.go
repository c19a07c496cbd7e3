package faults

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/netproxy"
)

// CutMode is how a client is cut off from its server.
type CutMode string

const (
	// CutSilent drops every byte in both directions and leaves the
	// connections open (a partition: the client sees only timeouts); a
	// client that gives up on a connection and closes it still closes
	// the server's side (netproxy.Drop). Healing closes the connections
	// it cut.
	CutSilent CutMode = "silent"
	// CutReset resets every connection (TCP RST) as soon as its client
	// sends, and every new one, while the cut lasts (netproxy.Reset).
	CutReset CutMode = "reset"
)

// Proxies is the set of in-process TCP proxies (internal/netproxy)
// between one client process and every server it talks to: one proxy per
// server address. The parent owns them, so it can cut a client off, delay
// it, or lose its replies, without touching the client.
type Proxies struct {
	set *netproxy.Set
}

// NewProxies starts one loopback proxy per upstream address ("host:port")
// for the client called name.
func NewProxies(name string, upstreams []string) (*Proxies, error) {
	set, err := netproxy.NewSet(upstreams)
	if err != nil {
		return nil, fmt.Errorf("faults: proxies of %s: %w", name, err)
	}
	return &Proxies{set: set}, nil
}

// Listen returns the proxy address standing for upstream address i.
func (ps *Proxies) Listen(i int) string { return ps.set.Proxy(i).Addr() }

// Rewrite replaces every address upstreams[i] in url by the address of
// proxy i. (The upstreams are the target's own, which a failover does not
// change, while the proxies point where the servers are now.)
func (ps *Proxies) Rewrite(url string, upstreams []string) string {
	to := make([]string, len(upstreams))
	for i := range upstreams {
		to[i] = ps.Listen(i)
	}
	return netproxy.ReplaceAddrs(url, upstreams, to)
}

// Close stops every proxy and closes its connections.
func (ps *Proxies) Close() { _ = ps.set.Close() }

// Cut cuts the client off from every server (or only from server only,
// when only >= 0) until the returned function is called.
func (ps *Proxies) Cut(mode CutMode, only int) (heal func(), err error) {
	var m netproxy.Mode
	switch mode {
	case CutSilent:
		m = netproxy.Drop
	case CutReset:
		m = netproxy.Reset
	default:
		return nil, fmt.Errorf("faults: unknown cut mode %q", mode)
	}
	if only >= 0 {
		return ps.set.Proxy(only).Cut(m), nil
	}
	return ps.set.Cut(m), nil
}

// Latency delays every byte from the servers by d (± jitter) until the
// returned function is called.
func (ps *Proxies) Latency(d, jitter time.Duration) (heal func(), err error) {
	return ps.set.Latency(d, jitter), nil
}

// LoseReplies drops every reply from the servers from now on and closes the
// client's connections after `after`; new connections are clean again once
// the connections closed. Called just before a request, it loses that
// request's reply although the server executed it.
func (ps *Proxies) LoseReplies(after time.Duration) error {
	ps.set.LoseReplies(after)
	return nil
}

// Redirect points proxy i at another upstream (a promoted replica): its
// open connections are closed and new ones go to addr.
func (ps *Proxies) Redirect(i int, addr string) error {
	if i < 0 || i >= ps.set.Len() {
		return fmt.Errorf("faults: redirect: no proxy %d", i)
	}
	ps.set.Proxy(i).Redirect(addr)
	return nil
}
