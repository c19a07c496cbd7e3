package bench

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock/internal/floor"
)

// implementations is the one table of the constructors of the targets
// that are not dlock's, by Target.Impl: the peers (peers.go), the floors
// and the raw round trips. The floors and round trips are
// internal/floor's, the same the drivers' go test benchmarks compare
// with: for each strategy, the fewest round trips that take and free a
// lock with its guarantees (its fencing token included), hand-written on
// one connection; and one request that does nothing. Both run on the same
// server as the targets they are compared with, in the same run. Tests
// add their own implementations to openers themselves.
func implementations() map[string]opener {
	m := map[string]opener{
		"redis-rtt": openRTT,
		"zk-rtt":    openRTT,
		"pg-rtt":    openRTT,
		"mysql-rtt": openRTT,
		// etcd's (etcd.go): the etcd client is the benchmark module's,
		// never the library's, so they are not internal/floor's.
		"etcd-rtt":   openEtcdRTT,
		"etcd-floor": openEtcdFloor,
	}
	for impl, p := range peers {
		m[impl] = p.open
	}
	for impl, f := range floorImpls {
		m[impl] = floorOpener(f.strategy)
	}
	return m
}

// floorImpl is a floor of internal/floor: its backend and strategy.
type floorImpl struct{ backend, strategy string }

// floorImpls are the floors by Target.Impl: one per dlock strategy, and
// the unfenced floors the peers are built on.
var floorImpls = map[string]floorImpl{
	"redis-floor":          {"redis", ""},
	"redis-unfenced-floor": {"redis", floor.Unfenced},
	// On the servers of a redlock:// or redis+cluster:// URL
	// (dlockbench's multiNode): Redlock's quorum, and the Cluster's
	// hash-tagged keys.
	"redlock-floor":          {"redlock", ""},
	"redlock-unfenced-floor": {"redlock", floor.Unfenced},
	"cluster-floor":          {"redis+cluster", ""},
	"zk-floor":               {"zookeeper", ""},
	"zk-unfenced-floor":      {"zookeeper", floor.Unfenced},
	"pg-forupdate-floor":     {"postgres", "forupdate"},
	"pg-version-floor":       {"postgres", "version"},
	"pg-advisory-floor":      {"postgres", "advisory"},
	"mysql-forupdate-floor":  {"mysql", "forupdate"},
	"mysql-version-floor":    {"mysql", "version"},
	"mysql-getlock-floor":    {"mysql", "getlock"},
}

// floorNote says what a floor sends and guarantees (floor.About), for the
// target's note.
func floorNote(impl string) string {
	if n, ok := etcdNotes[impl]; ok {
		return n
	}
	f := floorImpls[impl]
	return floor.About(f.backend, f.strategy)
}

// FloorNote says what the floor of a Target.Impl sends and guarantees,
// for the targets dlockbench describes itself (Redlock's, a Cluster's).
func FloorNote(impl string) string { return floorNote(impl) }

// floorOpener opens the floor of a strategy (a dlock strategy name, ""
// for Redis and ZooKeeper, or floor.Unfenced) on the target's server, as
// a Client that retries with a short pause (floors only run uncontended,
// where the first attempt succeeds). Its grants carry the floor's tokens.
func floorOpener(strategy string) opener {
	return func(ctx context.Context, t Target) (Client, error) {
		f, err := floor.Open(ctx, t.URL, strategy, &floor.Options{TTL: LeaseTTL})
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", t.Name, err)
		}
		return &retryClient{
			try: func(ctx context.Context, name string) (Held, bool, error) {
				g, ok, err := f.TryAcquire(ctx, name)
				if err != nil || !ok {
					return nil, false, err
				}
				return g, true, nil
			},
			close: f.Close,
		}, nil
	}
}

var released = noToken{release: func(context.Context) error { return nil }}

// openRTT opens the raw round trip of the target's server as a Client
// whose Acquire is one round trip and whose Release does nothing.
func openRTT(ctx context.Context, t Target) (Client, error) {
	r, err := floor.OpenRTT(ctx, t.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", t.Name, err)
	}
	return &retryClient{
		try: func(ctx context.Context, _ string) (Held, bool, error) {
			return released, true, r.RoundTrip(ctx)
		},
		close: r.Close,
	}, nil
}

// sqlConn is one SQL connection for reading a server's settings
// (server.go); pgConn and myConn open one.
type sqlConn struct{ *floor.SQLConn }

func (c sqlConn) text(ctx context.Context, query string) (string, error) { return c.Text(ctx, query) }
func (c sqlConn) close() error                                           { return c.Close() }

func dialSQL(ctx context.Context, t Target) (sqlConn, error) {
	c, err := floor.DialSQL(ctx, t.URL)
	if err != nil {
		return sqlConn{}, fmt.Errorf("bench: %s: %w", t.Name, err)
	}
	return sqlConn{c}, nil
}

var pgConn, myConn = dialSQL, dialSQL
