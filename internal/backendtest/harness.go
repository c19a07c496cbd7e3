package backendtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/netproxy"
)

// cutMode is how a harness's Disconnect cuts a Locker off.
type cutMode int

const (
	// cutNone: no Disconnector (a Redis Cluster client learns the nodes'
	// own addresses and would go around the proxies).
	cutNone cutMode = iota
	// cutClose closes the Locker's connections and refuses new ones
	// (Redis: the client sees the network fail at once).
	cutClose
	// cutSilent stops forwarding and keeps both sockets open, as behind a
	// dead network: the server notices nothing until its own timeout (a
	// ZooKeeper session expires, a SQL session idles).
	cutSilent
)

// HarnessOptions adds to a conformance harness.
type HarnessOptions struct {
	// Restarter: the harness implements conformance.Restarter (every
	// server killed and started again). The Env must own its servers.
	Restarter bool
}

// Conformance runs the conformance suite on env's servers with strategy
// ("" for the default), each case's harness on a namespace of its own (a
// Redis key prefix, a ZooKeeper path). env is called inside the suite's
// HarnessMaker (a child process of a cross-process case never starts a
// server), once. When the backend can tell (ZooKeeper), it then checks
// that no harness left a lock node behind.
func Conformance(t *testing.T, env func() *Env, strategy string, ho *HarnessOptions, opts ...conformance.Option) {
	var (
		once sync.Once
		e    *Env
		mu   sync.Mutex
		urls []string
	)
	conformance.Run(t, func(ctx context.Context) (conformance.Harness, error) {
		once.Do(func() { e = env() })
		h := newHarness(e, strategy, namespace(t))
		mu.Lock()
		urls = append(urls, h.url)
		mu.Unlock()
		return h.wrap(ho), nil
	}, opts...)
	for _, u := range urls {
		func() {
			hooks := e.Hooks(u)
			defer hooks.Close()
			if hooks.Orphans == nil {
				return
			}
			left, err := hooks.Orphans(t.Context())
			if err != nil {
				t.Errorf("orphans under %s: %v", u, err)
			}
			for _, o := range left {
				t.Errorf("orphan lock nodes: %s", o)
			}
		}()
	}
}

// EachStrategy runs Conformance on the backend's shared servers for every
// strategy, a subtest per strategy.
func EachStrategy(t *testing.T, b *Backend, opts ...conformance.Option) {
	for _, s := range b.Strategies {
		t.Run(s, func(t *testing.T) {
			Conformance(t, func() *Env { return b.Shared(t, nil) }, s, nil, opts...)
		})
	}
}

var nsSeq atomic.Int64

// namespace returns a namespace id no other harness uses:
// <test>-<pid>-<n>-<start time>.
func namespace(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '-' || r == '.' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return r
		}
		return '_'
	}, t.Name())
	return fmt.Sprintf("%s-%d-%d-%x", name, os.Getpid(), nsSeq.Add(1), time.Now().UnixNano())
}

// harness is a conformance harness on one namespace of an Env: each
// Locker reaches the servers through a netproxy.Set of its own, so that
// Disconnect cuts that client alone.
type harness struct {
	env   *Env
	url   string
	hooks *Hooks

	mu   sync.Mutex
	sets map[*dlock.Locker]*netproxy.Set
}

func newHarness(e *Env, strategy, ns string) *harness {
	u := e.Namespace(e.URL(strategy), ns)
	return &harness{env: e, url: u, hooks: e.Hooks(u), sets: map[*dlock.Locker]*netproxy.Set{}}
}

// wrap returns h with the optional interfaces its backend has.
func (h *harness) wrap(ho *HarnessOptions) conformance.Harness {
	restart := ho != nil && ho.Restarter
	cut := h.env.Backend.cut != cutNone
	switch {
	case cut && restart:
		return struct {
			*harness
			disconnector
			restarter
		}{h, disconnector{h}, restarter{h}}
	case cut:
		return struct {
			*harness
			disconnector
		}{h, disconnector{h}}
	case restart:
		return struct {
			*harness
			restarter
		}{h, restarter{h}}
	}
	return h
}

var (
	_ conformance.Revoker = (*harness)(nil)
	_ conformance.Residue = (*harness)(nil)
)

// URL is the namespace's URL, for child processes.
func (h *harness) URL() string { return h.url }

// NewLocker opens a client through proxies of its own (directly when the
// backend cannot be cut).
func (h *harness) NewLocker(ctx context.Context) (*dlock.Locker, error) {
	if h.env.Backend.cut == cutNone {
		return dlock.Open(ctx, h.url)
	}
	set, err := netproxy.NewSet(h.env.Upstreams)
	if err != nil {
		return nil, err
	}
	l, err := dlock.Open(ctx, set.Rewrite(h.url))
	if err != nil {
		_ = set.Close()
		return nil, err
	}
	h.mu.Lock()
	h.sets[l] = set
	h.mu.Unlock()
	return l, nil
}

func (h *harness) Revoke(ctx context.Context, name string) error { return h.hooks.Revoke(ctx, name) }

func (h *harness) Residue(ctx context.Context, name string) (int, error) {
	return h.hooks.Residue(ctx, name)
}

// Close closes the proxies and the hooks' connections.
func (h *harness) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, s := range h.sets {
		errs = append(errs, s.Close())
	}
	return errors.Join(append(errs, h.hooks.Close())...)
}

type disconnector struct{ h *harness }

// Disconnect cuts l off as a network failure would (see cutMode).
func (d disconnector) Disconnect(ctx context.Context, l *dlock.Locker) error {
	d.h.mu.Lock()
	set := d.h.sets[l]
	d.h.mu.Unlock()
	if set == nil {
		return errors.New("backendtest: not a Locker of this harness")
	}
	if d.h.env.Backend.cut == cutClose {
		return set.Close()
	}
	for i := range d.h.env.Upstreams {
		set.Proxy(i).Cut(netproxy.Silent) // for good: never healed
	}
	return nil
}

type restarter struct{ h *harness }

// RestartServer kills every server and starts it again, data kept.
func (r restarter) RestartServer(ctx context.Context) error {
	if r.h.hooks.Restart == nil {
		return errors.New("backendtest: the servers are shared: no restart")
	}
	return r.h.hooks.Restart(ctx, -1)
}
