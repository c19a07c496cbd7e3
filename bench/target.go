package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Kinds of target: what a row of the report measures.
const (
	KindDlock = "dlock" // a dlock backend and strategy, opened by URL
	KindPeer  = "peer"  // another lock library on the same server
	KindFloor = "floor" // the hand-written minimum for a strategy
	KindRTT   = "rtt"   // the server's raw round trip
)

// LeaseTTL is the lease length every lock in the benchmark asks for
// (dlock's TTL, redsync's expiry, redislock's ttl), so that no
// implementation is favoured by a shorter or longer lease.
const LeaseTTL = 10 * time.Second

// Target names one thing to measure. It is plain data (it crosses the
// process boundary with -procs): Open turns it into clients.
type Target struct {
	// Name is the row label in every table: "redis", "postgres/advisory",
	// "redsync", "floor redis", "rtt redis".
	Name string `json:"name"`
	// Kind is KindDlock, KindPeer, KindFloor or KindRTT.
	Kind string `json:"kind"`
	// Impl selects the peer, floor or RTT implementation (see Open).
	Impl string `json:"impl,omitempty"`
	// URL is the dlock URL (KindDlock) or the server URL the peer, floor
	// or RTT client connects to. It may hold a password: reports use
	// RedactedURL.
	URL string `json:"url"`
	// Backend is the server family: memory, redis, zookeeper, postgres, mysql.
	Backend string `json:"backend"`
	// Server identifies the server instance (for server metrics).
	Server string `json:"server,omitempty"`
	// Floor is the Name of the floor target this one is compared with.
	Floor string `json:"floor,omitempty"`
	// RTT is the Name of the RTT target of its server.
	RTT string `json:"rtt,omitempty"`
	// InProcessOnly: the target cannot be shared by separate processes
	// (mem://), so -procs runs it in one process.
	InProcessOnly bool `json:"in_process_only,omitempty"`
	// Note says how the target is configured (peers' retry policy...).
	Note string `json:"note,omitempty"`
	// Only limits the target to these workload kinds (nil: all it can run).
	Only []string `json:"only,omitempty"`
}

// RedactedURL is the URL without its password.
func (t Target) RedactedURL() string { return driver.Redact(t.URL) }

// Contends reports whether the target can run contended workloads:
// floors and round trips measure one uncontended operation only.
func (t Target) Contends() bool { return t.Kind == KindDlock || t.Kind == KindPeer }

// Runs reports whether the target takes part in a workload kind: floors
// and round trips only in the uncontended one, and Only when it is set.
func (t Target) Runs(kind string) bool {
	if len(t.Only) > 0 && !slices.Contains(t.Only, kind) {
		return false
	}
	return kind == Uncontended || t.Contends()
}

// Client is one lock user: its own connection or session, used by one
// goroutine at a time.
type Client interface {
	// Acquire blocks until name is held or ctx ends.
	Acquire(ctx context.Context, name string) (Held, error)
	// FailedAttempts is the number of attempts so far that found the lock
	// taken and had to retry (0 for implementations that queue natively).
	FailedAttempts() uint64
	Close() error
}

// Held is a granted lock.
type Held interface {
	// Token is the fencing token, 0 when the implementation has none.
	Token() uint64
	Release(ctx context.Context) error
}

// opener makes a client for a target.
type opener func(ctx context.Context, t Target) (Client, error)

// openers maps Target.Impl to its constructor for peers, floors and RTT.
var openers = map[string]opener{}

// Open connects one client of t.
func Open(ctx context.Context, t Target) (Client, error) {
	if t.Kind == KindDlock {
		return openDlock(ctx, t)
	}
	op := openers[t.Impl]
	if op == nil {
		return nil, fmt.Errorf("bench: unknown implementation %q for target %s", t.Impl, t.Name)
	}
	return op(ctx, t)
}

// fencing reports whether c's tokens must strictly increase across
// holders of a name: true for dlock backends whose Capabilities say so.
func fencing(c Client) bool {
	f, ok := c.(interface{ Fencing() bool })
	return ok && f.Fencing()
}

// dlockClient is a *dlock.Locker of its own: a separate client of the
// backend, as a separate process would have.
type dlockClient struct {
	l    *dlock.Locker
	cnt  *countingDriver
	opts *dlock.AcquireOptions
}

func openDlock(ctx context.Context, t Target) (Client, error) {
	l0, err := dlock.Open(ctx, t.URL)
	if err != nil {
		return nil, err
	}
	cd := &countingDriver{Locker: l0.Driver()}
	// The driver is re-wrapped so that failed attempts can be counted; the
	// optional interfaces the portable layer looks for are kept.
	var drv driver.Locker = cd
	b, isB := l0.Driver().(driver.Blocker)
	w, isW := l0.Driver().(driver.Watcher)
	switch {
	case isB && isW:
		drv = struct {
			*countingDriver
			driver.Blocker
			driver.Watcher
		}{cd, b, w}
	case isB:
		drv = struct {
			*countingDriver
			driver.Blocker
		}{cd, b}
	case isW:
		drv = struct {
			*countingDriver
			driver.Watcher
		}{cd, w}
	}
	return &dlockClient{
		l:    dlock.NewLocker(drv),
		cnt:  cd,
		opts: &dlock.AcquireOptions{TTL: LeaseTTL},
	}, nil
}

func (c *dlockClient) Acquire(ctx context.Context, name string) (Held, error) {
	ls, err := c.l.Acquire(ctx, name, c.opts)
	if err != nil {
		return nil, err
	}
	return lease{ls}, nil
}

func (c *dlockClient) Fencing() bool          { return c.l.Capabilities().Fencing }
func (c *dlockClient) FailedAttempts() uint64 { return c.cnt.failed.Load() }
func (c *dlockClient) Close() error           { return c.l.Close() }

type lease struct{ *dlock.Lease }

func (l lease) Release(ctx context.Context) error { return l.Lease.Release(ctx) }

// countingDriver counts the TryAcquire calls that found the lock taken.
type countingDriver struct {
	driver.Locker
	failed atomic.Uint64
}

func (c *countingDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	l, err := c.Locker.TryAcquire(ctx, req)
	if errors.Is(err, driver.ErrNotAcquired) {
		c.failed.Add(1)
	}
	return l, err
}

// noToken is a Held without a fencing token.
type noToken struct {
	release func(ctx context.Context) error
}

func (n noToken) Token() uint64                     { return 0 }
func (n noToken) Release(ctx context.Context) error { return n.release(ctx) }

// retryClient turns a one-attempt acquire (a floor) into a blocking one
// with a short fixed pause; floors only run uncontended, where the first
// attempt succeeds.
type retryClient struct {
	try    func(ctx context.Context, name string) (Held, bool, error)
	close  func() error
	failed atomic.Uint64
}

func (c *retryClient) Acquire(ctx context.Context, name string) (Held, error) {
	for {
		h, ok, err := c.try(ctx, name)
		if err != nil || ok {
			return h, err
		}
		c.failed.Add(1)
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *retryClient) FailedAttempts() uint64 { return c.failed.Load() }
func (c *retryClient) Close() error           { return c.close() }
