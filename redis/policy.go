package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// evictionGate refuses servers whose maxmemory-policy is allkeys-*: such a
// server may evict a held lock's key (a second owner gets the lock while
// the first still believes it holds it) and, worse, the fence counter,
// which has no TTL and is otherwise never evicted (tokens then start again
// at 1 and the resource-side check no longer protects anything).
// volatile-* policies are accepted: they can evict a lock key (which has a
// TTL) but never the fence counter, so tokens keep increasing; the holder
// learns of the loss at its next refresh (documented in doc.go).
//
// Each server is asked once (CONFIG GET maxmemory-policy) before the first
// attempt on it; a server that refuses CONFIG (renamed, disabled, denied
// by an ACL) cannot be checked and is accepted. A refusal is not
// remembered, so a server whose policy was fixed is accepted at the next
// attempt; a policy changed after the check is not seen.
type evictionGate struct {
	mu    sync.Mutex
	ok    map[any]bool      // servers checked and accepted, by client or address
	tried map[any]time.Time // when a server last failed to answer the check
}

// retryCheck is how long a Redlock node that did not answer the check is
// left alone before it is asked again (each time costs a node timeout).
const retryCheck = time.Second

// due reports whether a Redlock node must be asked before an attempt: it
// was not accepted yet, and did not fail to answer within retryCheck.
func (g *evictionGate) due(id any) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, tried := g.tried[id]
	return !g.ok[id] && (!tried || time.Since(t) > retryCheck)
}

// check returns nil when the server behind c, identified by id, was
// accepted, an error wrapping dlock.ErrInvalidOption when its policy is
// allkeys-*, or the error of the request.
func (g *evictionGate) check(ctx context.Context, id any, c goredis.Cmdable) error {
	g.mu.Lock()
	ok := g.ok[id]
	g.mu.Unlock()
	if ok {
		return nil
	}
	if err := checkEviction(ctx, c); err != nil {
		if errors.Is(err, dlock.ErrInvalidOption) {
			return err
		}
		var rerr goredis.Error
		if !errors.As(err, &rerr) || !configUnavailable(rerr.Error()) {
			g.mu.Lock()
			if g.tried == nil {
				g.tried = make(map[any]time.Time)
			}
			g.tried[id] = time.Now()
			g.mu.Unlock()
			return fmt.Errorf("redis: check maxmemory-policy: %w", err)
		}
		// CONFIG renamed, disabled or denied: the policy cannot be known.
	}
	g.mu.Lock()
	if g.ok == nil {
		g.ok = make(map[any]bool)
	}
	g.ok[id] = true
	g.mu.Unlock()
	return nil
}

// configUnavailable reports a server's refusal to run CONFIG GET at all.
func configUnavailable(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "unknown command") || strings.Contains(m, "unknown subcommand") ||
		strings.HasPrefix(m, "noperm") || strings.Contains(m, "no permissions")
}

// checkEviction asks one server for its maxmemory-policy.
func checkEviction(ctx context.Context, c goredis.Cmdable) error {
	v, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return err
	}
	if p := v["maxmemory-policy"]; strings.HasPrefix(p, "allkeys-") {
		addr := ""
		if cl, ok := c.(*goredis.Client); ok {
			addr = cl.Options().Addr + ": "
		}
		return fmt.Errorf("redis: %smaxmemory-policy %s can evict lock keys and fence counters (use noeviction or a volatile-* policy): %w",
			addr, p, dlock.ErrInvalidOption)
	}
	return nil
}

// checkLock passes the server that stores k (the slot's master in a
// Cluster) through the gate.
func (l *locker) checkLock(ctx context.Context, k keys) error {
	if l.cluster == nil {
		return l.gate.check(ctx, l.client, l.client)
	}
	node, err := l.cluster.MasterForKey(ctx, k.lock)
	if err != nil {
		return fmt.Errorf("redis: cluster: %w", err)
	}
	return l.gate.check(ctx, node.Options().Addr, node)
}

// checkNodes asks, in parallel and within timeout, every Redlock node that
// is due (see evictionGate.due) for its policy, and returns the first
// refusal. A node that does not answer is not refused: it is asked again
// after retryCheck, and meanwhile its vote counts as usual. The check runs
// before the attempt (not alongside it) because a grant does not wait for
// the nodes outside its quorum.
func (r *redlock) checkNodes(ctx context.Context, timeout time.Duration) error {
	var out chan error // made when a node is due: most attempts ask none
	asked := 0
	for _, c := range r.nodes {
		if !r.gate.due(c) {
			continue
		}
		if out == nil {
			out = make(chan error, len(r.nodes))
		}
		asked++
		go func() {
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			out <- r.gate.check(nctx, c, c)
		}()
	}
	var refused error
	for range asked {
		if err := ignoreUnreachable(<-out); err != nil && refused == nil {
			refused = err
		}
	}
	return refused
}

// checkOpen checks every server of a Locker opened by this package at
// once, so that a refused maxmemory-policy fails dlock.Open rather than
// the first acquire. Servers that do not answer are checked at their first
// attempt instead. It returns nil for a Locker of another package.
func checkOpen(ctx context.Context, d driver.Locker) error {
	switch d := d.(type) {
	case *locker:
		if d.cluster == nil {
			return ignoreUnreachable(d.gate.check(ctx, d.client, d.client))
		}
		var mu sync.Mutex
		var errs []error
		_ = d.cluster.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
			if err := ignoreUnreachable(d.gate.check(ctx, node.Options().Addr, node)); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
		return errors.Join(errs...)
	case *redlock:
		var errs []error
		for _, c := range d.nodes {
			if err := ignoreUnreachable(d.gate.check(ctx, c, c)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	return nil
}

// ignoreUnreachable keeps only a refused policy.
func ignoreUnreachable(err error) error {
	if errors.Is(err, dlock.ErrInvalidOption) {
		return err
	}
	return nil
}
