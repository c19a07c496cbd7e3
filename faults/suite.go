package faults

import (
	"context"
	"fmt"
	"github.com/dlock-go/dlock/driver"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/testenv"
)

// MaxPermits is the largest semaphore a run checks: the fenced
// semaphore model's limit.
const MaxPermits = conformance.MaxModelPermits

// Options configure Suite. Zero fields take the defaults of the short mode.
type Options struct {
	// Backends and Faults select by name; empty means all.
	Backends, Faults []string
	// Clients per run (default 5).
	Clients int
	// TTL of the leases (default 1s).
	TTL time.Duration
	// Duration of each run (default 5s) and the interval between
	// injections within it (default 2s).
	Duration, Every time.Duration
	// BackendDuration, when set, is the time per backend: it is shared
	// among that backend's runs (targets × faults), each lasting at least
	// Duration.
	BackendDuration time.Duration
	// Parallel is how many backends run at once (default 1).
	Parallel int
	// Permits is the size of the semaphore of the semaphore runs
	// (default 2); negative means no semaphore runs. Every backend whose
	// Capabilities.MaxPermits allows it runs SemaphoreFaults (default
	// kill and pause, those selected by Faults) with Clients processes
	// taking permits of one semaphore.
	Permits int
	// SemaphoreFaults are the faults of the semaphore runs; nil means
	// kill and pause, empty means none.
	SemaphoreFaults []string
	// Dir receives the histories of failing runs with porcupine's
	// visualisation ("" : a temporary directory).
	Dir string
	// Logf receives progress lines.
	Logf func(format string, args ...any)
	// Command is recorded in the report.
	Command string
}

func (o *Options) defaults() {
	if o.Clients <= 0 {
		o.Clients = 5
	}
	if o.TTL <= 0 {
		o.TTL = time.Second
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Every <= 0 {
		o.Every = 2 * time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.Permits == 0 {
		o.Permits = 2
	}
	if o.Permits > MaxPermits {
		o.Permits = MaxPermits
	}
	if o.SemaphoreFaults == nil {
		o.SemaphoreFaults = []string{"kill", "pause"}
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Suite runs every selected backend × fault and returns the report. A
// backend whose server is not installed or whose driver is not linked into
// the binary is listed in Report.Skipped.
func Suite(ctx context.Context, opts Options) (*Report, error) {
	opts.defaults()
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "dlock-faults-")
		if err != nil {
			return nil, fmt.Errorf("faults: %w", err)
		}
		opts.Dir = d
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("faults: %w", err)
	}
	rep := NewReport(opts.Command)
	var faults []*Fault
	for _, f := range Catalogue() {
		if len(opts.Faults) == 0 || slices.Contains(opts.Faults, f.Name) {
			faults = append(faults, f)
		}
	}
	var mu sync.Mutex
	results := map[string][]*Result{}
	sem := make(chan struct{}, opts.Parallel)
	var wg sync.WaitGroup
	var backends []*Backend
	for _, b := range Backends() {
		if len(opts.Backends) > 0 && !slices.Contains(opts.Backends, b.Name) {
			continue
		}
		if !slices.Contains(dlock.Schemes(), b.Scheme) {
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: driver for %s:// not linked in", b.Name, b.Scheme))
			continue
		}
		backends = append(backends, b)
	}
	for _, b := range backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			rs, skip := runBackend(ctx, b, faults, opts)
			mu.Lock()
			results[b.Name] = rs
			if skip != "" {
				rep.Skipped = append(rep.Skipped, skip)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, b := range backends {
		rep.Results = append(rep.Results, results[b.Name]...)
	}
	rep.Elapsed = time.Since(rep.Started).Round(time.Millisecond)
	return rep, ctx.Err()
}

func runBackend(ctx context.Context, b *Backend, faults []*Fault, opts Options) ([]*Result, string) {
	t0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	targets, closeFn, err := b.Start(sctx)
	cancel()
	if err != nil {
		if testenv.IsMissing(err) {
			return nil, fmt.Sprintf("%s: %v", b.Name, err)
		}
		return nil, fmt.Sprintf("%s: could not start: %v", b.Name, err)
	}
	defer closeFn()
	opts.Logf("%s: servers up in %v", b.Name, time.Since(t0).Round(time.Millisecond))
	type job struct {
		t       *Target
		f       *Fault
		permits int
	}
	var jobs []job
	for _, t := range targets {
		for _, f := range faults {
			if f.Applies(t) {
				jobs = append(jobs, job{t, f, 0})
			}
		}
	}
	for _, t := range targets {
		if opts.Permits <= 0 || t.Caps.MaxPermits < opts.Permits {
			continue
		}
		for _, f := range faults {
			if f.Applies(t) && slices.Contains(opts.SemaphoreFaults, f.Name) {
				jobs = append(jobs, job{t, f, opts.Permits})
			}
		}
	}
	if opts.BackendDuration > 0 {
		opts.Duration = max(opts.Duration, opts.BackendDuration/time.Duration(max(len(jobs), 1)))
	}
	var out []*Result
	for _, j := range jobs {
		t, f := j.t, j.f
		if ctx.Err() != nil {
			return out, ""
		}
		name := fmt.Sprintf("faults/%s/%s/%d", strings.ReplaceAll(t.Backend, "/", "-"), f.Name, time.Now().UnixNano())
		ttl, duration, every := runTiming(t.Caps, opts)
		cfg := Config{
			Target: t, Fault: f, Clients: opts.Clients, TTL: ttl,
			Duration: duration, Every: every, Name: name, Logf: opts.Logf,
			Dir: opts.Dir, Permits: j.permits,
		}
		if f.Name == "none" {
			cfg.Fault = nil
		}
		res, err := Run(ctx, cfg)
		if err != nil && res == nil {
			out = append(out, &Result{Backend: t.Backend, Fault: f.Name, Permits: j.permits, FencedViolations: -1, Failures: []string{err.Error()}})
			continue
		}
		res.Fault = f.Name
		saveHistory(res, opts.Dir)
		opts.Logf("%s", strings.Join(res.cells(), " | "))
		out = append(out, res)
	}
	return out, ""
}

// runTiming returns the lease TTL of a run against a backend with caps,
// the asked-for TTL moved into the backend's declared TTL range, and the
// run's duration and injection interval scaled by the same factor, so that
// a backend with a longer minimum TTL gets as many TTLs per run.
func runTiming(caps driver.Capabilities, opts Options) (ttl, duration, every time.Duration) {
	ttl = max(opts.TTL, caps.MinTTL)
	if caps.MaxTTL > 0 {
		ttl = min(ttl, caps.MaxTTL)
	}
	if ttl == opts.TTL {
		return ttl, opts.Duration, opts.Every
	}
	scale := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) * float64(ttl) / float64(opts.TTL))
	}
	return ttl, scale(opts.Duration), scale(opts.Every)
}

// saveHistory writes a run's history (JSON) into dir, next to the
// porcupine visualisation of a failing one.
func saveHistory(res *Result, dir string) {
	base := filepath.Join(dir, strings.ReplaceAll(strings.ReplaceAll(res.Name(), "/", "-"), " ", "-")+"-"+res.Fault)
	f, err := os.Create(base + ".history.json")
	if err != nil {
		return
	}
	defer f.Close()
	_ = writeJSON(f, res.History)
}
