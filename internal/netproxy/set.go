package netproxy

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Set is one Proxy per upstream address: what a client that talks to
// several servers (Redlock nodes, an ensemble) goes through.
type Set struct {
	upstreams []string
	proxies   []*Proxy
}

// NewSet starts one proxy per upstream address ("host:port").
func NewSet(upstreams []string) (*Set, error) {
	s := &Set{upstreams: append([]string(nil), upstreams...)}
	for _, up := range upstreams {
		p, err := New(up)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("netproxy: proxy to %s: %w", up, err)
		}
		s.proxies = append(s.proxies, p)
	}
	return s, nil
}

// Len is the number of proxies.
func (s *Set) Len() int { return len(s.proxies) }

// Proxy returns the proxy of upstream address i.
func (s *Set) Proxy(i int) *Proxy { return s.proxies[i] }

// Rewrite returns url with every upstream address the set was made with
// replaced by its proxy's address.
func (s *Set) Rewrite(url string) string {
	to := make([]string, len(s.proxies))
	for i, p := range s.proxies {
		to[i] = p.Addr()
	}
	return ReplaceAddrs(url, s.upstreams, to)
}

// ReplaceAddrs returns s with every address from[i] ("host:port")
// replaced by to[i], in one pass: an address is replaced only whole (not
// "127.0.0.1:80" inside "127.0.0.1:8080" or "10.0.0.1:80" inside
// "110.0.0.1:80"), and a replacement is never replaced again.
func ReplaceAddrs(s string, from, to []string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		best := -1
		if i == 0 || !hostByte(s[i-1]) {
			for j, f := range from {
				end := i + len(f)
				if f != "" && strings.HasPrefix(s[i:], f) && (end == len(s) || !isDigit(s[end])) &&
					(best < 0 || len(f) > len(from[best])) {
					best = j
				}
			}
		}
		if best < 0 {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(to[best])
		i += len(from[best])
	}
	return b.String()
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func hostByte(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '.' || c == '-'
}

// Cut cuts every proxy of the set (see Proxy.Cut) until heal is called.
func (s *Set) Cut(mode Mode) (heal func()) {
	heals := make([]func(), len(s.proxies))
	for i, p := range s.proxies {
		heals[i] = p.Cut(mode)
	}
	return func() {
		for _, h := range heals {
			h()
		}
	}
}

// Latency delays the replies of every proxy of the set (see
// Proxy.Latency) until heal is called.
func (s *Set) Latency(d, jitter time.Duration) (heal func()) {
	heals := make([]func(), len(s.proxies))
	for i, p := range s.proxies {
		heals[i] = p.Latency(d, jitter)
	}
	return func() {
		for _, h := range heals {
			h()
		}
	}
}

// LoseReplies loses the replies of every proxy of the set for after (see
// Proxy.LoseReplies).
func (s *Set) LoseReplies(after time.Duration) {
	for _, p := range s.proxies {
		p.LoseReplies(after)
	}
}

// Close closes every proxy of the set.
func (s *Set) Close() error {
	var errs []error
	for _, p := range s.proxies {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
