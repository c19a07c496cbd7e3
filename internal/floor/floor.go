// Package floor holds the floors and raw round trips that dlock's
// benchmarks compare it with, written once for the drivers' go test
// benchmarks and for dlockbench.
//
// A floor is the least a lock needs on a backend to give the guarantees
// of the dlock strategy it stands beside, hand-written on one connection
// (or session) of its own, with nothing else: no keep-alive, no waiting
// queue, no retries, and no fencing token where the mechanism does not
// write one anyway. Each takes and frees a lock in the fewest round trips
// the backend allows:
//
//	backend    strategy   take                                        free
//	redis      ""         SET NX PX (expires on the server)           EVALSHA compare-and-delete
//	zookeeper  ""         create an ephemeral node (session-bound)    delete
//	postgres   forupdate  BEGIN; SELECT … FOR UPDATE NOWAIT (1 trip)  COMMIT
//	mysql      forupdate  BEGIN; SELECT … FOR UPDATE NOWAIT (1 trip)  COMMIT
//	postgres   version    UPDATE of a lease row: free or expired by   UPDATE if still ours
//	mysql      version      the server's clock; the row's version++   and unexpired
//	postgres   advisory   pg_try_advisory_lock (session-bound)        pg_advisory_unlock
//	mysql      getlock    GET_LOCK(key, 0) (session-bound)            RELEASE_LOCK
//
// The strategy names are dlock's: a benchmark of a dlock URL with
// strategy=s opens the floor s of the same server. The pinned floors
// (forupdate, advisory, getlock, zookeeper) hold their connection or
// session for as long as the lock is held, so a holder that dies frees
// it, as dlock's do; the others expire on the server's clock. What they
// leave out: dlock also sets the server's idle timeouts to the TTL with
// each pinned lock (a holder that hangs with its connection open loses
// it), in the round trip that takes it.
//
// A floor's attempt never waits: a lock held by another holder is
// refused at once (NOWAIT, try-lock, a conditional write), which costs
// nothing on a free lock and lets a caller retry as it likes.
//
// An RTT is a backend's raw round trip, a request that does nothing:
// PING, exists("/"), SELECT 1. ZooKeeper's writes, which go through its
// leader and log, have their own (OpenWriteRTT).
//
// The URLs are the server URLs dlock's drivers take, without the
// drivers' own query parameters: redis://, rediss://, zk://,
// postgres:// (whose query is pgx's connection settings), mysql://.
package floor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/stats"
)

// ErrNotHeld is returned by a release that found the lock no longer
// its own (expired, or freed by the server).
var ErrNotHeld = errors.New("floor: lock not held")

// DefaultTTL is the lease of the floors that expire when Options.TTL is
// zero.
const DefaultTTL = 10 * time.Second

// Options are a floor's settings; nil means the defaults.
type Options struct {
	// TTL is the lease of the floors that expire on the server (redis,
	// version); DefaultTTL when zero. The others hold until freed or
	// until their connection or session ends.
	TTL time.Duration
}

func (o *Options) ttl() time.Duration {
	if o == nil || o.TTL <= 0 {
		return DefaultTTL
	}
	return o.TTL
}

// Lock is one floor on a connection of its own, used by one goroutine at
// a time.
type Lock struct {
	try   func(ctx context.Context, name string) (release func(context.Context) error, ok bool, err error)
	close func() error
}

// TryAcquire makes one attempt at name. ok is false, with a nil error,
// when another holder has it. release frees it and returns ErrNotHeld
// when it was no longer held.
func (l *Lock) TryAcquire(ctx context.Context, name string) (release func(context.Context) error, ok bool, err error) {
	return l.try(ctx, name)
}

// Cycle takes and frees name, the unit of an uncontended benchmark; a
// lock that is taken is an error.
func (l *Lock) Cycle(ctx context.Context, name string) error {
	release, ok, err := l.try(ctx, name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("floor: %q is held by another holder", name)
	}
	return release(ctx)
}

// Close closes the floor's connection, freeing what it holds.
func (l *Lock) Close() error { return l.close() }

// Open connects the floor of strategy (a dlock strategy name, "" for
// Redis and ZooKeeper) on the server of rawURL.
func Open(ctx context.Context, rawURL, strategy string, opts *Options) (*Lock, error) {
	backend, err := backendOf(rawURL)
	if err != nil {
		return nil, err
	}
	for _, f := range floors {
		if f.backend == backend && f.strategy == strategy {
			return f.open(ctx, rawURL, opts.ttl())
		}
	}
	return nil, fmt.Errorf("floor: no %s floor for strategy %q (have %q)", backend, strategy, Strategies(backend))
}

// Strategies lists the floors of a backend (redis, zookeeper, postgres,
// mysql) by strategy name.
func Strategies(backend string) []string {
	var out []string
	for _, f := range floors {
		if f.backend == backend {
			out = append(out, f.strategy)
		}
	}
	return out
}

// About says in a few words what the floor of a backend's strategy
// sends, for reports; "" when there is none.
func About(backend, strategy string) string {
	for _, f := range floors {
		if f.backend == backend && f.strategy == strategy {
			return f.about
		}
	}
	return ""
}

// floors is the table of floors.
var floors = []struct {
	backend, strategy, about string
	open                     func(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error)
}{
	{"redis", "", "SET NX PX + EVALSHA compare-and-delete", openRedis},
	{"zookeeper", "", "create ephemeral + delete", openZooKeeper},
	{"postgres", "forupdate", "BEGIN; SELECT … FOR UPDATE (one round trip) / COMMIT", sqlFloor(forUpdate)},
	{"postgres", "version", "conditional UPDATE of a lease row / UPDATE to free", sqlFloor(version)},
	{"postgres", "advisory", "pg_try_advisory_lock / pg_advisory_unlock", sqlFloor(native)},
	{"mysql", "forupdate", "BEGIN; SELECT … FOR UPDATE (one round trip) / COMMIT", sqlFloor(forUpdate)},
	{"mysql", "version", "conditional UPDATE of a lease row / UPDATE to free", sqlFloor(version)},
	{"mysql", "getlock", "GET_LOCK / RELEASE_LOCK", sqlFloor(native)},
}

// RTT is a backend's raw round trip on a connection of its own, used by
// one goroutine at a time.
type RTT struct {
	do    func(ctx context.Context) error
	close func() error
}

// OpenRTT connects the raw round trip of the server of rawURL: PING,
// exists("/") or SELECT 1.
func OpenRTT(ctx context.Context, rawURL string) (*RTT, error) {
	backend, err := backendOf(rawURL)
	if err != nil {
		return nil, err
	}
	switch backend {
	case "redis":
		return redisRTT(ctx, rawURL)
	case "zookeeper":
		return zooKeeperRTT(ctx, rawURL, false)
	}
	return sqlRTT(ctx, rawURL)
}

// OpenWriteRTT connects the round trip of one write that does nothing
// else, on ZooKeeper (a setData of a node of its own): what a hand-off
// waits for there, every write passing through the leader and its log.
func OpenWriteRTT(ctx context.Context, rawURL string) (*RTT, error) {
	if backend, err := backendOf(rawURL); err != nil || backend != "zookeeper" {
		return nil, fmt.Errorf("floor: a write round trip is ZooKeeper's only (zk://)")
	}
	return zooKeeperRTT(ctx, rawURL, true)
}

// RoundTrip makes one round trip.
func (r *RTT) RoundTrip(ctx context.Context) error { return r.do(ctx) }

// Median is the median of n round trips.
func (r *RTT) Median(ctx context.Context, n int) (time.Duration, error) {
	return stats.MedianOf(n, func() error { return r.do(ctx) })
}

// Close closes the round trip's connection.
func (r *RTT) Close() error { return r.close() }

// backendOf names the server family of a URL's scheme.
func backendOf(rawURL string) (string, error) {
	scheme, _, _ := strings.Cut(rawURL, "://")
	switch strings.ToLower(scheme) {
	case "redis", "rediss":
		return "redis", nil
	case "zk":
		return "zookeeper", nil
	case "postgres", "postgresql":
		return "postgres", nil
	case "mysql":
		return "mysql", nil
	}
	return "", fmt.Errorf("floor: no floor for scheme %q", scheme)
}

// keyPrefix sets the floors' keys, nodes and lock names apart from
// dlock's on the same server.
const keyPrefix = "dlockfloor:"

// parseURL parses rawURL without quoting it in the error (it may hold a
// password).
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("floor: bad URL")
	}
	return u, nil
}

// scrub hides pw in err's text: a client library may quote its
// connection string.
func scrub(err error, pw string) error {
	if err == nil || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}
