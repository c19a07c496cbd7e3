// Package floor holds the floors and raw round trips that dlock's
// benchmarks compare it with, written once for the drivers' go test
// benchmarks and for dlockbench.
//
// A floor is the fewest round trips that give, on a backend, what the
// dlock strategy it stands beside gives: mutual exclusion, a release
// that never frees another holder's lock, a lease where the strategy has
// one (a TTL on the server's clock, or the server's idle timeout set to
// the TTL on a pinned connection), and dlock's fencing token (a counter
// that strictly increases across the holders of a name and is durable
// before it is returned). It is hand-written on a connection (or
// session) of its own, with nothing else: no keep-alive, no waiting
// queue, no retries, no observer. Each guarantee costs what the table
// says; "+" joins what travels in one round trip:
//
//	backend    strategy   take                                            free
//	redis      ""         EVALSHA: SET NX PX + INCR of the name's counter  EVALSHA compare-and-delete
//	redis      unfenced   SET NX PX (no token)                            EVALSHA compare-and-delete
//	zookeeper  ""         multi: create ephemeral-sequential + setData     delete (a name of its own)
//	                        of the parent (its mzxid is the node's czxid)
//	zookeeper  unfenced   create ephemeral (no token)                     delete
//	postgres   forupdate  BEGIN + SELECT … FOR UPDATE NOWAIT, then        ROLLBACK
//	                        nextval while the crash marker is there
//	postgres   version    UPDATE of a lease row, free or expired by the   UPDATE if still ours
//	                        server's clock, version+1 RETURNING version     and unexpired
//	postgres   advisory   pg_try_advisory_lock + idle timeout + nextval   pg_advisory_unlock + timeout reset
//	mysql      forupdate  BEGIN + SELECT … FOR UPDATE NOWAIT +            ROLLBACK + wait_timeout reset
//	                        wait_timeout + AUTO_INCREMENT insert while
//	                        the crash marker names the server
//	mysql      version    as postgres, version = LAST_INSERT_ID(version+1) as postgres
//	mysql      getlock    GET_LOCK(key, 0) + wait_timeout + the name's    RELEASE_LOCK + wait_timeout reset
//	                        counter+1
//
// The strategy names are dlock's: a benchmark of a dlock URL with
// strategy=s opens the floor s of the same server. The unfenced floors
// are what the other Go libraries (redsync, redislock, zk.Lock) are
// built on: no token. A floor of the strategy "" or of a named one is
// fenced: Grant.Token is its token, as a dlock lease's.
//
// Where each guarantee costs its round trip:
//   - Redis: the token is free (the INCR runs in the script that takes the
//     lock); the owner-safe release is one script. dlock's own acquire
//     script also registers waiters and retries idempotently, which a
//     floor, never waiting, does not need.
//   - ZooKeeper: the token comes in the create's reply when the create is
//     a multi that also writes the parent (its mzxid is the create's zxid,
//     the node's czxid, dlock's token); the child count in that reply says
//     whether ours is the only node (granted) or not (refused: our node is
//     deleted, a second round trip only when the lock is taken). A
//     sequential name is the grant's own, so a plain delete cannot free a
//     later grant's node. What a floor leaves out: dlock's protected (GUID)
//     names, which recover a create whose reply was lost.
//   - forupdate: the row lock lives in an open transaction, and the token
//     is dlock's: taken in it, under the row lock, from a counter that is
//     never rolled back while the server runs (a sequence, an
//     AUTO_INCREMENT), but whose advance is not flushed, so a crash may
//     set it back. A marker table that every crash or restart empties
//     (UNLOGGED on PostgreSQL, MEMORY on MySQL) guards it: no token is
//     taken while it is missing, and the first attempt that finds it
//     missing moves the counter on by 2^36 in a flushed commit and sets
//     it, once per crash. The idle timeout (PostgreSQL's
//     idle_in_transaction_session_timeout, set once per connection;
//     MySQL's wait_timeout, set with the lock) ends a hung holder's
//     transaction. Release rolls back: nothing is written or flushed.
//   - version: the version column written by the conditional UPDATE is the
//     token, returned by the same statement and committed with it.
//   - advisory, getlock: the token is taken in the statement (or batch)
//     that takes the lock, conditional on the grant, and committed with
//     it; the idle timeout that ends a hung holder's session travels with
//     them, and is reset by the statement that frees the lock.
//
// The pinned floors (forupdate, advisory, getlock, zookeeper) hold their
// connection or session for as long as the lock is held, so a holder that
// dies frees it, as dlock's do; the others expire on the server's clock.
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
	try   func(ctx context.Context, name string) (*Grant, bool, error)
	close func() error
}

// Grant is a lock a floor took.
type Grant struct {
	token   uint64
	release func(context.Context) error
}

// Token is the fencing token of the grant: it strictly increases across
// the holders of a name; 0 on an unfenced floor.
func (g *Grant) Token() uint64 { return g.token }

// Release frees the lock; ErrNotHeld when it was no longer held.
func (g *Grant) Release(ctx context.Context) error { return g.release(ctx) }

// TryAcquire makes one attempt at name. ok is false, with a nil error,
// when another holder has it.
func (l *Lock) TryAcquire(ctx context.Context, name string) (g *Grant, ok bool, err error) {
	return l.try(ctx, name)
}

// Cycle takes and frees name, the unit of an uncontended benchmark; a
// lock that is taken is an error.
func (l *Lock) Cycle(ctx context.Context, name string) error {
	g, ok, err := l.try(ctx, name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("floor: %q is held by another holder", name)
	}
	return g.release(ctx)
}

// Close closes the floor's connection, freeing what it holds.
func (l *Lock) Close() error { return l.close() }

// Unfenced is the strategy of the Redis and ZooKeeper floors without a
// fencing token: what redsync, redislock and zk.Lock are built on.
const Unfenced = "unfenced"

// Open connects the floor of strategy (a dlock strategy name, "" for
// Redis and ZooKeeper, or Unfenced) on the server of rawURL.
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
// sends and what it guarantees, for reports; "" when there is none.
func About(backend, strategy string) string {
	for _, f := range floors {
		if f.backend == backend && f.strategy == strategy {
			return f.about
		}
	}
	return ""
}

// Fenced reports whether the floor of a backend's strategy issues
// fencing tokens (Grant.Token).
func Fenced(backend, strategy string) bool {
	return About(backend, strategy) != "" && strategy != Unfenced
}

// floors is the table of floors; about is what reports print (the
// package doc says why each guarantee costs what it does).
var floors = []struct {
	backend, strategy, about string
	open                     func(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error)
}{
	{"redis", "", "EVALSHA (SET NX PX + INCR token) / EVALSHA compare-and-delete: token, TTL, owner-safe release; 2 round trips", openRedis},
	{"redis", Unfenced, "SET NX PX / EVALSHA compare-and-delete: TTL, owner-safe release, no token; 2 round trips", openRedisUnfenced},
	{"redlock", "", "on every node at once: EVALSHA (SET NX PX + INCR) / EVALSHA compare-and-delete; a quorum N/2+1 within TTL - drift, token the quorum's largest counter (dlock's Redlock): 2 parallel round trips", openRedlock},
	{"redlock", Unfenced, "on every node at once: SET NX PX / EVALSHA compare-and-delete; a quorum N/2+1 within TTL - drift, no token (what redsync is built on): 2 parallel round trips", openRedlockUnfenced},
	{"redis+cluster", "", "EVALSHA (SET NX PX + INCR token, both keys in the name's slot) / EVALSHA compare-and-delete, on the name's master: 2 round trips", openRedis},
	{"zookeeper", "", "multi (create ephemeral-sequential + setData parent: czxid token, alone = held) / delete: 2 round trips", openZooKeeper},
	{"zookeeper", Unfenced, "create ephemeral / delete: session-bound, no token; 2 round trips", openZooKeeperUnfenced},
	{"postgres", "forupdate", "BEGIN + SELECT … FOR UPDATE NOWAIT, then nextval token under the row lock while the crash marker is there (idle timeout set per connection) / ROLLBACK: 2 round trips", sqlFloor(forUpdate)},
	{"postgres", "version", "UPDATE of a lease row (free or expired) RETURNING version+1 token / conditional UPDATE to free: 2 round trips", sqlFloor(version)},
	{"postgres", "advisory", "pg_try_advisory_lock + idle timeout + nextval token / pg_advisory_unlock: 2 round trips", sqlFloor(native)},
	{"mysql", "forupdate", "BEGIN + SELECT … FOR UPDATE NOWAIT + wait_timeout + AUTO_INCREMENT token under the row lock while the crash marker names the server / ROLLBACK: 2 round trips", sqlFloor(forUpdate)},
	{"mysql", "version", "UPDATE of a lease row (free or expired), version+1 token / conditional UPDATE to free: 2 round trips", sqlFloor(version)},
	{"mysql", "getlock", "GET_LOCK + wait_timeout + counter+1 token / RELEASE_LOCK: 2 round trips", sqlFloor(native)},
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
	case "redlock", "redis+cluster":
		return nil, fmt.Errorf("floor: no round trip of several servers (%s://): use one node's redis:// URL", backend)
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
	case "redlock", "redis+cluster":
		return strings.ToLower(scheme), nil
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
