package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/testenv"
)

// harness runs the conformance suite on real ZooKeeper servers. Each
// Locker it opens connects through its own TCP proxies (one per member), so
// that Disconnect can black-hole that client as a network failure would:
// the session then expires on the server, and the lease must be reported
// lost before another client is granted. Revoke deletes the holder's node
// with a separate session, as the server does when the holder's session
// expires. Residue counts the queued nodes that are not the holder.
type harness struct {
	t       testing.TB
	addrs   []string
	prefix  string
	query   string
	admin   *zk.Conn
	restart func(ctx context.Context) error // nil: no Restarter

	mu      sync.Mutex
	proxies map[*dlock.Locker][]*proxy
}

var (
	_ conformance.Revoker      = (*harness)(nil)
	_ conformance.Disconnector = (*harness)(nil)
	_ conformance.Residue      = (*harness)(nil)
)

// conformanceTimeout is the session timeout of the suite's Lockers: short,
// so that expiries are quick, but far above the ping interval.
const conformanceTimeout = "2s"

func newHarness(t testing.TB, addrs []string, recipe string) *harness {
	return &harness{
		t:       t,
		addrs:   addrs,
		prefix:  testPrefix(t),
		query:   "session_timeout=" + conformanceTimeout + "&recipe=" + recipe,
		proxies: make(map[*dlock.Locker][]*proxy),
	}
}

func (h *harness) URL() string {
	return "zk://" + strings.Join(h.addrs, ",") + h.prefix + "?" + h.query
}

func (h *harness) NewLocker(ctx context.Context) (*dlock.Locker, error) {
	var pxs []*proxy
	var hosts []string
	for _, a := range h.addrs {
		p := newProxy(h.t, a)
		pxs = append(pxs, p)
		hosts = append(hosts, p.addr())
	}
	l, err := dlock.Open(ctx, "zk://"+strings.Join(hosts, ",")+h.prefix+"?"+h.query)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.proxies[l] = pxs
	h.mu.Unlock()
	return l, nil
}

func (h *harness) adminConn() *zk.Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.admin == nil {
		h.admin = adminConn(h.t, h.addrs...)
	}
	return h.admin
}

func (h *harness) Close() error { return nil }

// Disconnect stalls every byte between the Locker and the servers, for
// good: the Locker's session expires.
func (h *harness) Disconnect(ctx context.Context, l *dlock.Locker) error {
	h.mu.Lock()
	pxs := h.proxies[l]
	h.mu.Unlock()
	if len(pxs) == 0 {
		return errors.New("zookeeper harness: not a Locker of this harness")
	}
	for _, p := range pxs {
		p.pause()
	}
	return nil
}

// holderPath returns the holder's node of name, or "".
func (h *harness) holderPath(name string) (string, []string, error) {
	parent := h.prefix + "/" + escapeName(name)
	k, _, err := h.adminConn().Children(parent)
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	if len(k) == 0 {
		return "", nil, nil
	}
	q := sortQueue(k)
	return parent + "/" + q[0].name, k, nil
}

// Revoke deletes the holder's node, as the server does when the holder's
// session expires.
func (h *harness) Revoke(ctx context.Context, name string) error {
	p, _, err := h.holderPath(name)
	if err != nil {
		return err
	}
	if p == "" {
		return fmt.Errorf("zookeeper harness: %q is not held", name)
	}
	return h.adminConn().Delete(p, -1)
}

// Residue counts the children of the name's parent that are not the
// holder (the lowest).
func (h *harness) Residue(ctx context.Context, name string) (int, error) {
	_, k, err := h.holderPath(name)
	if err != nil {
		return 0, err
	}
	return max(len(k)-1, 0), nil
}

// restartHarness adds the Restarter hook.
type restartHarness struct{ *harness }

func (h restartHarness) RestartServer(ctx context.Context) error { return h.restart(ctx) }

// checkNoOrphans is run at the end of a suite: no lock node is left under
// any harness prefix.
func checkNoOrphans(t *testing.T, addrs []string, prefixes []string) {
	admin := adminConn(t, addrs...)
	for _, p := range prefixes {
		assertNoOrphans(t, admin, p)
	}
}

func runConformance(t *testing.T, addrs func() []string, recipe string, restart func(ctx context.Context) error) {
	var mu sync.Mutex
	var prefixes []string
	var lastAddrs []string
	conformance.Run(t, func(ctx context.Context) (conformance.Harness, error) {
		a := addrs()
		h := newHarness(t, a, recipe)
		h.restart = restart
		mu.Lock()
		prefixes = append(prefixes, h.prefix)
		lastAddrs = a
		mu.Unlock()
		if restart != nil {
			return restartHarness{h}, nil
		}
		return h, nil
	}, conformance.WithSlack(time.Second))
	if len(prefixes) > 0 {
		checkNoOrphans(t, lastAddrs, prefixes)
	}
}

// TestConformance runs the suite on a single server, for both recipes (the
// basic recipe must pass the safety cases too).
func TestConformance(t *testing.T) {
	for _, recipe := range []string{RecipeFair, RecipeBasic} {
		t.Run(recipe, func(t *testing.T) {
			var once sync.Once
			var srv *testenv.Server
			get := func() *testenv.Server {
				once.Do(func() { srv = testenv.NewZooKeeper(t, nil) })
				return srv
			}
			runConformance(t, func() []string { return []string{get().Addr} }, recipe,
				func(ctx context.Context) error { return get().Restart(ctx) })
		})
	}
}

// TestConformanceEnsemble runs the suite on a 3-node ensemble, for both
// recipes.
func TestConformanceEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node ensemble")
	}
	var once sync.Once
	var e *testenv.Ensemble
	get := func() []string {
		once.Do(func() { e = testenv.ZooKeeperEnsemble(t, 3) })
		return e.Addrs
	}
	for _, recipe := range []string{RecipeFair, RecipeBasic} {
		t.Run(recipe, func(t *testing.T) { runConformance(t, get, recipe, nil) })
	}
}
