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
	"github.com/dlock-go/dlock/internal/testenv"

	// The backends dlockbench measures: every driver registers its schemes.
	_ "github.com/dlock-go/dlock/memory"
)

// env is the servers and targets of a run.
type env struct {
	servers []*bench.Server
	byID    map[string]*bench.Server
	targets []bench.Target
	skipped []string
	closers []func()
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

// start starts every server testenv can start, in parallel, and lists
// the targets on each; a server that cannot start is reported skipped.
func (e *env) start(ctx context.Context, cfg *config, stderr io.Writer) {
	e.targets = append(e.targets, bench.MemoryTarget())
	type starter struct {
		family string
		start  func(ctx context.Context) (*testenv.Server, error)
	}
	starters := []starter{
		{"redis", func(ctx context.Context) (*testenv.Server, error) { return testenv.StartRedis(ctx, nil) }},
		{"zookeeper", func(ctx context.Context) (*testenv.Server, error) { return testenv.StartZooKeeper(ctx, nil) }},
		{"postgres", func(ctx context.Context) (*testenv.Server, error) { return testenv.StartPostgres(ctx, nil) }},
		{"mysql", func(ctx context.Context) (*testenv.Server, error) { return testenv.StartMySQL(ctx, nil) }},
	}
	started := make([]*testenv.Server, len(starters))
	errs := make([]error, len(starters))
	var wg sync.WaitGroup
	for i, st := range starters {
		if !cfg.wantServer(st.family) {
			continue
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, startTimeout)
			defer cancel()
			started[i], errs[i] = st.start(sctx)
		})
	}
	if cfg.progress {
		fmt.Fprintf(stderr, "dlockbench: starting servers…\r")
	}
	wg.Wait()
	for i, st := range starters {
		ts := started[i]
		switch {
		case !cfg.wantServer(st.family):
			continue
		case errs[i] != nil:
			e.skipped = append(e.skipped, fmt.Sprintf("%s: %v", st.family, errs[i]))
			continue
		}
		e.closers = append(e.closers, func() { ts.Close() })
		s := &bench.Server{ID: st.family, Backend: st.family, URL: ts.URL, Addr: ts.Addr, PID: ts.Pid(),
			Origin: "dlockbench (internal/testenv)", Startup: ts.StartupTime, Settings: maps.Clone(ts.Settings)}
		if s.Settings == nil {
			s.Settings = map[string]string{}
		}
		if ts.Version != "" {
			s.Settings["version"] = ts.Version
		}
		e.add(s)
		ts2, skipped := bench.TargetsFor(s)
		e.targets = append(e.targets, ts2...)
		for _, n := range slices.Sorted(maps.Keys(skipped)) {
			e.skipped = append(e.skipped, n+": "+skipped[n])
		}
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
