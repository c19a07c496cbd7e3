package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/bench"
	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/testenv"

	// The backends dlockbench measures: every driver registers its schemes
	// (etcd's, a module of its own, through package bench).
	_ "github.com/dlock-go/dlock/etcd"
	_ "github.com/dlock-go/dlock/memory"
	_ "github.com/dlock-go/dlock/mysql"
	_ "github.com/dlock-go/dlock/postgres"
	_ "github.com/dlock-go/dlock/redis"
	_ "github.com/dlock-go/dlock/zookeeper"
)

// env is the servers and targets of a run.
type env struct {
	servers []*bench.Server
	byID    map[string]*bench.Server
	targets []bench.Target
	skipped []string
	// failed are the servers that could not start (also in skipped).
	failed  []string
	closers []func()
	// pin pins the clients and servers to CPUs of their own (-pin-cpus);
	// nil when off.
	pin *pinner
}

func (e *env) close() {
	for _, s := range e.servers {
		s.Close()
	}
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// startTimeout bounds the start of one server (initdb, a JVM...).
const startTimeout = 3 * time.Minute

func setup(ctx context.Context, cfg *config, stderr io.Writer) (*env, error) {
	e := &env{byID: map[string]*bench.Server{}}
	if len(cfg.urls) > 0 {
		if err := e.fromURLs(ctx, cfg); err != nil {
			e.close()
			return nil, err
		}
	} else {
		e.start(ctx, cfg, stderr)
		if len(e.failed) > 0 && !cfg.allowMissing {
			e.close()
			return nil, fmt.Errorf("a server could not start, so its backends would be missing from the comparison (-allow-missing runs without them): %s", strings.Join(e.failed, "; "))
		}
	}
	for _, s := range e.servers {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		s.ReadSettings(rctx)
		cancel()
	}
	var kept []bench.Target
	for _, t := range e.targets {
		if cfg.noPeers && t.Kind == bench.KindPeer || !cfg.wanted(t) {
			continue
		}
		kept = append(kept, t)
	}
	e.targets = kept
	if len(e.targets) == 0 {
		e.close()
		return nil, fmt.Errorf("no target to measure (skipped: %s)", strings.Join(e.skipped, "; "))
	}
	return e, nil
}

func (e *env) add(s *bench.Server) {
	e.servers = append(e.servers, s)
	e.byID[s.ID] = s
}

// started is a server setup testenv started.
type started struct {
	server  *bench.Server
	targets []bench.Target
	skipped map[string]string
	close   func()
}

// fromTestenv describes a server testenv started.
func fromTestenv(id string, ts *testenv.Server) *bench.Server {
	s := &bench.Server{ID: id, Backend: ts.Kind, URL: ts.URL, Addr: ts.Addr, PID: ts.Pid(),
		Origin: "dlockbench (internal/testenv)", Startup: ts.StartupTime, Settings: maps.Clone(ts.Settings)}
	if s.Settings == nil {
		s.Settings = map[string]string{}
	}
	if ts.Version != "" {
		s.Settings["version"] = ts.Version
	}
	return s
}

// single describes a backend of one server and lists its targets.
func single(id string, env *backendtest.Env) *started {
	s := fromTestenv(id, env.Servers[0])
	targets, skipped := bench.TargetsFor(s)
	return &started{server: s, targets: targets, skipped: skipped, close: func() { env.Close() }}
}

// multiNode describes Redlock's masters or a Redis Cluster: one dlock
// target (and redsync, which is Redlock, on the masters), compared with
// its floor on the same servers (Redlock's quorum, fenced as dlock's
// Redlock is; the Cluster's hash-tagged keys) and with the single Redis
// server's round trip.
func multiNode(id, dlockURL string, nodes []*testenv.Server, closeFn func()) *started {
	s := &bench.Server{ID: id, Backend: testenv.KindRedis, URL: dlockURL, Origin: "dlockbench (internal/testenv)"}
	var addrs []string
	for i, n := range nodes {
		s.Nodes = append(s.Nodes, fromTestenv(fmt.Sprintf("%s-%d", id, i+1), n))
		addrs = append(addrs, n.Addr)
	}
	s.Addr = strings.Join(addrs, ",")
	st := &started{server: s, close: closeFn, skipped: map[string]string{}}
	redlock := strings.HasPrefix(dlockURL, "redlock://")
	floor := func(impl, name string) string {
		st.targets = append(st.targets, bench.Target{Name: name, Kind: bench.KindFloor, Impl: impl, URL: dlockURL,
			Backend: "redis", Server: id, RTT: "rtt redis", Note: bench.FloorNote(impl)})
		return name
	}
	t := bench.Target{Name: id, Kind: bench.KindDlock, URL: dlockURL, Backend: "redis", Server: id,
		RTT: "rtt redis", Note: "compared with its floor on the same servers and the single Redis server's round trip"}
	if !bench.Registered(dlockURL) {
		st.skipped[id] = "driver not built into this binary yet"
		return st
	}
	if redlock {
		t.Floor = floor("redlock-floor", "floor "+id)
	} else {
		t.Floor = floor("cluster-floor", "floor "+id)
	}
	st.targets = append(st.targets, t)
	if redlock {
		// redsync is Redlock: one pool per master, compared with the
		// unfenced Redlock floor it is built on, as shipped and tuned.
		unfenced := floor("redlock-unfenced-floor", "floor "+id+" unfenced")
		for _, impl := range []string{"redsync", "redsync tuned"} {
			st.targets = append(st.targets, bench.Target{Name: impl + " (redlock)", Kind: bench.KindPeer, Impl: impl,
				URL: dlockURL, Backend: "redis", Server: id, Floor: unfenced, RTT: "rtt redis",
				Note: bench.PeerNotes[impl] + "; one pool per master"})
		}
	}
	return st
}

// start starts every server testenv can start, in parallel, and lists
// the targets on each; a server that cannot start is reported skipped.
func (e *env) start(ctx context.Context, cfg *config, stderr io.Writer) {
	e.targets = append(e.targets, bench.MemoryTarget())
	// One row per server setup: a backend of the table
	// (internal/backendtest), started fresh with its options.
	type starter struct {
		family  string // the -servers name, the server's id
		backend string // backendtest's name
		opts    *backendtest.Options
	}
	starters := []starter{
		{"redis", "redis", nil},
		{"zookeeper", "zookeeper", nil},
		{"postgres", "postgres", nil},
		{"mysql", "mysql", nil},
		// ZooKeeper fsyncs every write by default; testenv's server and
		// the row above run with forceSync=no. This one measures the
		// default, on the workloads where it shows.
		{"zookeeper-fsync", "zookeeper", &backendtest.Options{ForceSync: true}},
		{"redlock", "redlock", nil},
		{"redis+cluster", "redis-cluster", nil},
		// etcd fsyncs every write by default: the "etcd" row measures
		// that; "etcd-nofsync" runs with --unsafe-no-fsync, labelled,
		// beside the other servers that run without fsync. Both run
		// every workload, each with its floor, round trip and peer.
		{"etcd", "etcd", nil},
		{"etcd-nofsync", "etcd", &backendtest.Options{UnsafeNoFsync: true}},
	}
	startOne := func(ctx context.Context, st starter) (*started, error) {
		env, err := backendtest.Lookup(st.backend).Start(ctx, st.opts)
		if err != nil {
			return nil, err
		}
		if len(env.Servers) > 1 {
			return multiNode(st.family, env.URL(""), env.Servers, func() { env.Close() }), nil
		}
		r := single(st.family, env)
		switch st.family {
		case "zookeeper-fsync":
			fsyncOnly(r)
		case "etcd":
			labelEtcd(r, bench.EtcdFsyncNote, "")
		case "etcd-nofsync":
			labelEtcd(r, bench.EtcdNoFsyncNote, " nofsync")
		}
		return r, nil
	}
	results := make([]*started, len(starters))
	errs := make([]error, len(starters))
	var wg sync.WaitGroup
	for i, st := range starters {
		if !cfg.wantServer(st.family) {
			continue
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, startTimeout)
			defer cancel()
			results[i], errs[i] = startOne(sctx, st)
		})
	}
	if cfg.progress {
		fmt.Fprintf(stderr, "dlockbench: starting servers…\r")
	}
	wg.Wait()
	for i, st := range starters {
		r := results[i]
		switch {
		case !cfg.wantServer(st.family):
			continue
		case errs[i] != nil:
			e.skipped = append(e.skipped, fmt.Sprintf("%s: %v", st.family, errs[i]))
			e.failed = append(e.failed, fmt.Sprintf("%s: %v", st.family, errs[i]))
			continue
		}
		e.closers = append(e.closers, r.close)
		e.add(r.server)
		e.targets = append(e.targets, r.targets...)
		for _, n := range slices.Sorted(maps.Keys(r.skipped)) {
			e.skipped = append(e.skipped, n+": "+r.skipped[n])
		}
	}
}

// fsyncOnly keeps the zookeeper-fsync row's dlock targets of the fair
// recipe, measured on the workloads where fsync shows.
func fsyncOnly(st *started) {
	var kept []bench.Target
	for _, t := range st.targets {
		// No peers here, so no floor of theirs either (the unfenced one).
		if t.Kind == bench.KindPeer || strings.HasSuffix(t.Name, "/basic") ||
			t.Kind == bench.KindFloor && strings.HasSuffix(t.Name, " unfenced") {
			continue
		}
		t.Only = []string{bench.Uncontended, bench.Handoff}
		t.Note = "ZooKeeper with forceSync=yes (its default: fsync every write)"
		kept = append(kept, t)
	}
	st.targets = kept
	delete(st.skipped, "zookeeper-fsync/basic")
}

// labelEtcd labels the targets of an etcd server with its fsync setting:
// the dlock row's note, and the peer's, whose name gets suffix (one peer
// row per server: names are unique in a report).
func labelEtcd(st *started, note, suffix string) {
	for i, t := range st.targets {
		switch t.Kind {
		case bench.KindDlock:
			t.Note = note + bench.EtcdTTLNote()
		case bench.KindPeer:
			t.Name += suffix
			t.Note = note + "; " + t.Note
		case bench.KindFloor, bench.KindRTT:
			if suffix != "" {
				t.Note = strings.TrimPrefix(t.Note+"; ", "; ") + note
			}
		}
		st.targets[i] = t
	}
}

// fromURLs measures the servers the user named.
func (e *env) fromURLs(ctx context.Context, cfg *config) error {
	for _, raw := range cfg.urls {
		fam := bench.FamilyOf(raw)
		if fam == "memory" {
			e.targets = append(e.targets, bench.TargetsForURL(nil, raw)...)
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return fmt.Errorf("bad URL %s", bench.Target{URL: raw}.RedactedURL())
		}
		host := strings.Split(u.Host, ",")[0]
		id := fam
		if s := e.byID[id]; s != nil && s.Addr != host {
			id = fam + "@" + host
		}
		s := e.byID[id]
		if s == nil {
			s = &bench.Server{ID: id, Backend: fam, URL: bench.ServerURL(raw), Addr: host, Origin: "user (-url)"}
			pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			err := s.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("%s does not answer: %v", bench.Target{URL: raw}.RedactedURL(), err)
			}
			e.add(s)
		}
		for _, t := range bench.TargetsForURL(s, raw) {
			if !slices.ContainsFunc(e.targets, func(o bench.Target) bool { return o.Name == t.Name }) {
				e.targets = append(e.targets, t)
			}
		}
	}
	return nil
}
