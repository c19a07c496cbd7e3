package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Status is the outcome of one case.
type Status string

// The outcomes of a case.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// CaseResult is the outcome of one case.
type CaseResult struct {
	Name   string
	Rule   string
	Status Status
	// Errors are the failures (Status Failed).
	Errors []string
	// SkipReason says why the case did not run (Status Skipped).
	SkipReason string
	// Notes are parts of a case that were skipped, and measurements.
	Notes   []string
	Elapsed time.Duration
}

// Report is the outcome of a run of the suite. As an error (Check returns
// it when a case failed) it lists every failure; errors.As finds it and
// errors.Is/As also see each failure as a *CaseError.
type Report struct {
	Backend string
	Cases   []CaseResult
}

func (r *Report) names(s Status) []string {
	var out []string
	for _, c := range r.Cases {
		if c.Status == s {
			out = append(out, c.Name)
		}
	}
	return out
}

// Passed returns the names of the cases that passed.
func (r *Report) Passed() []string { return r.names(Passed) }

// Failed returns the names of the cases that failed.
func (r *Report) Failed() []string { return r.names(Failed) }

// Skipped returns the names of the cases that were skipped.
func (r *Report) Skipped() []string { return r.names(Skipped) }

// Case returns the result of the named case.
func (r *Report) Case(name string) (CaseResult, bool) {
	for _, c := range r.Cases {
		if c.Name == name {
			return c, true
		}
	}
	return CaseResult{}, false
}

// Err returns r when a case failed, nil otherwise.
func (r *Report) Err() error {
	if len(r.Failed()) == 0 {
		return nil
	}
	return r
}

// Error lists every failure.
func (r *Report) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "conformance: %s: %d of %d cases failed (%d passed, %d skipped)",
		r.Backend, len(r.Failed()), len(r.Cases), len(r.Passed()), len(r.Skipped()))
	for _, e := range r.Unwrap() {
		b.WriteString("\n")
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns one *CaseError per failed case.
func (r *Report) Unwrap() []error {
	var errs []error
	for _, c := range r.Cases {
		if c.Status == Failed {
			errs = append(errs, &CaseError{Case: c.Name, Rule: c.Rule, Errors: c.Errors})
		}
	}
	return errs
}

// CaseError is one failed case: the rule it checks and what broke it.
type CaseError struct {
	Case   string
	Rule   string
	Errors []string
}

func (e *CaseError) Error() string {
	return fmt.Sprintf("%s: %s\n\trule: %s", e.Case, strings.Join(e.Errors, "\n\t"), e.Rule)
}

// Check runs every case against the backend of mk and returns nil when
// none failed, or a *Report listing every failure (skipped cases are
// listed as skipped, never as passed). Like testing/fstest.TestFS it can
// be called by a test that expects a failure. Use Evaluate for the report
// of a run that passed.
//
// The cross-process cases re-execute the running test binary; outside
// `go test` they are skipped.
func Check(ctx context.Context, mk HarnessMaker, opts ...Option) error {
	return Evaluate(ctx, mk, opts...).Err()
}

// Evaluate runs every case against the backend of mk and returns the
// report, whatever the outcome.
func Evaluate(ctx context.Context, mk HarnessMaker, opts ...Option) *Report {
	childMain()
	cfg := newConfig(opts)
	cfg.childTest = callerTestName()
	rep := &Report{}
	for _, cs := range cases {
		res := runCase(ctx, mk, cs, cfg)
		if rep.Backend == "" && res.backend != "" {
			rep.Backend = res.backend
		}
		rep.Cases = append(rep.Cases, res.CaseResult)
	}
	return rep
}

// Run runs every case against the backend of mk, each as a subtest of t
// named after the case, so `go test -run 'TestConformance/KeepAlive'`
// runs one. A driver's test:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(ctx context.Context) (conformance.Harness, error) {
//			return newHarness(t), nil
//		})
//	}
//
// When the test binary runs as a cross-process case's child, Run plays
// the child's role and exits the process instead.
func Run(t *testing.T, mk HarnessMaker, opts ...Option) {
	childMain()
	t.Helper()
	cfg := newConfig(opts)
	if cfg.logf == nil {
		cfg.logf = func(string, ...any) {}
	}
	cfg.childTest = strings.SplitN(t.Name(), "/", 2)[0]
	ctx := t.Context()
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			c := *cfg
			c.logf = t.Logf
			res := runCase(ctx, mk, cs, &c)
			switch res.Status {
			case Skipped:
				t.Skip(res.SkipReason)
			case Failed:
				for _, e := range res.Errors {
					t.Error(e)
				}
				t.Errorf("rule: %s", cs.rule)
			}
		})
	}
}

// callerTestName returns the name of the top-level test that called
// Check (found on the goroutine's stack below testing.tRunner), or "".
func callerTestName() string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	prev := ""
	for {
		f, more := frames.Next()
		if f.Function == "testing.tRunner" {
			name := prev[strings.LastIndex(prev, "/")+1:]
			if i := strings.Index(name, "."); i >= 0 {
				name = name[i+1:]
			}
			if i := strings.Index(name, "."); i >= 0 {
				name = name[:i]
			}
			return name
		}
		prev = f.Function
		if !more {
			return ""
		}
	}
}

type result struct {
	CaseResult
	backend string
}

// runCase runs one case with a fresh harness and a watchdog.
func runCase(ctx context.Context, mk HarnessMaker, cs testCase, cfg *config) result {
	res := result{CaseResult: CaseResult{Name: cs.name, Rule: cs.rule}}
	if reason, ok := cfg.skip[cs.name]; ok {
		res.Status, res.SkipReason = Skipped, reason
		return res
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, cfg.watchdog)
	defer cancel()
	c := &caseT{ctx: cctx, cfg: cfg, caseName: cs.name, prefix: uniquePrefix(cs.name)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				c.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		h, err := mk(cctx)
		if err != nil {
			c.Fatalf("harness: %v", err)
		}
		c.mu.Lock()
		c.h = h
		c.mu.Unlock()
		l := c.Locker()
		c.mu.Lock()
		c.caps = l.Capabilities()
		c.mu.Unlock()
		for _, nd := range cs.needs {
			if reason := nd(c); reason != "" {
				c.Skipf("%s", reason)
			}
		}
		c.rtt = c.measureRTT(l)
		c.Logf("round trip %v, fast bound %v, wake bound %v", c.rtt, c.fast(), c.wake())
		cs.f(c)
	}()
	timer := time.NewTimer(cfg.watchdog + 10*time.Second)
	defer timer.Stop()
	abandoned := false
	select {
	case <-done:
	case <-timer.C:
		abandoned = true
		c.Errorf("watchdog: the case did not finish within %v", cfg.watchdog)
	}
	cleanupErr := c.cleanup(abandoned)
	if cleanupErr != nil && !abandoned {
		c.Errorf("clean-up: %v", cleanupErr)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	res.Elapsed = time.Since(start)
	res.Notes = c.notes
	res.backend = c.caps.Backend
	switch {
	case len(c.errs) > 0:
		res.Status, res.Errors = Failed, c.errs
	case c.skipped:
		res.Status, res.SkipReason = Skipped, c.skipReason
	default:
		res.Status = Passed
	}
	return res
}

func uniquePrefix(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("conformance-%s-%s", strings.ToLower(name), hex.EncodeToString(b[:]))
}

// caseT is the state of one running case. Fatalf and Skipf may be called only
// from the case's own goroutine; Errorf and Logf from any.
type caseT struct {
	ctx      context.Context
	cfg      *config
	caseName string
	prefix   string
	caps     dlock.Capabilities
	rtt      time.Duration

	mu         sync.Mutex
	h          Harness
	lockers    []*dlock.Locker
	errs       []string
	notes      []string
	skipped    bool
	skipReason string
	cleanups   []func()
	nameSeq    int
}

// Errorf records a failure and continues.
func (c *caseT) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// Fatalf records a failure and ends the case.
func (c *caseT) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	runtime.Goexit()
}

// Skipf ends the case as skipped (unless it already failed).
func (c *caseT) Skipf(format string, args ...any) {
	c.mu.Lock()
	c.skipped, c.skipReason = true, fmt.Sprintf(format, args...)
	c.mu.Unlock()
	runtime.Goexit()
}

// Logf records a progress line.
func (c *caseT) Logf(format string, args ...any) {
	if c.cfg.logf != nil {
		c.cfg.logf(format, args...)
	}
}

// Notef records a note that is kept in the report (a skipped part, a
// measurement).
func (c *caseT) Notef(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	c.mu.Lock()
	c.notes = append(c.notes, s)
	c.mu.Unlock()
	c.Logf("%s", s)
}

// Locker opens a new client on the harness; the case's clean-up closes it.
func (c *caseT) Locker() *dlock.Locker {
	l, err := c.h.NewLocker(c.ctx)
	if err != nil {
		c.Fatalf("harness: new locker: %v", err)
	}
	c.mu.Lock()
	c.lockers = append(c.lockers, l)
	c.mu.Unlock()
	return l
}

// Name returns a lock name unique to this run of the case.
func (c *caseT) Name(s string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nameSeq++
	return fmt.Sprintf("%s-%d-%s", c.prefix, c.nameSeq, s)
}

// Cleanup registers f to run at the end of the case, before the Lockers
// are closed.
func (c *caseT) Cleanup(f func()) {
	c.mu.Lock()
	c.cleanups = append(c.cleanups, f)
	c.mu.Unlock()
}

func (c *caseT) cleanup(abandoned bool) error {
	c.mu.Lock()
	fns := slices.Clone(c.cleanups)
	lockers := slices.Clone(c.lockers)
	h := c.h
	c.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		for i := len(fns) - 1; i >= 0; i-- {
			fns[i]()
		}
		var errs []error
		for _, l := range lockers {
			if err := l.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if h != nil {
			if err := h.Close(); err != nil {
				errs = append(errs, fmt.Errorf("harness close: %w", err))
			}
		}
		done <- errors.Join(errs...)
	}()
	wait := 30 * time.Second
	if abandoned {
		wait = 5 * time.Second
	}
	select {
	case err := <-done:
		return err
	case <-time.After(wait):
		return fmt.Errorf("closing the lockers and the harness took longer than %v", wait)
	}
}

// measureRTT returns the fastest of a few TryAcquire calls on a free name:
// the unit of the case's timing bounds.
func (c *caseT) measureRTT(l *dlock.Locker) time.Duration {
	name := c.Name("rtt")
	best := time.Duration(1<<63 - 1)
	for range 5 {
		start := time.Now()
		ls, err := l.TryAcquire(c.ctx, name, &dlock.AcquireOptions{TTL: 5 * c.cfg.ttl})
		d := time.Since(start)
		if err != nil {
			c.Fatalf("TryAcquire of a free name %q: %v", name, err)
		}
		best = min(best, d)
		if err := ls.Release(c.ctx); err != nil {
			c.Fatalf("Release of a lease just acquired: %v", err)
		}
	}
	return best
}

// fast is the bound for an operation that must not wait for anything but
// the server: a few round trips plus the slack.
func (c *caseT) fast() time.Duration { return 10*c.rtt + c.cfg.slack }

// wake is the bound from a release to a waiter's grant.
func (c *caseT) wake() time.Duration { return c.wakeBound(c.caps.Wait) }

// wakeBound is the bound from a release to the grant of a waiter woken
// as w says (Capabilities.Wait or SemaphoreWait).
func (c *caseT) wakeBound(w driver.WaitKind) time.Duration {
	d := c.fast()
	if w == "poll" || w == "" {
		d += pollCap
	}
	return d
}

// expiryNotice is how long a waiter may take, beyond the server's expiry,
// to find an expired lock free: nobody releases it, so a notify-woken
// waiter relies on its fallback timer (capped at watchCap unless the
// driver reports the remaining TTL).
func (c *caseT) expiryNotice() time.Duration { return c.noticeBound(c.caps.Wait) }

// noticeBound is expiryNotice for a waiter woken as w says
// (Capabilities.Wait or SemaphoreWait).
func (c *caseT) noticeBound(w driver.WaitKind) time.Duration {
	d := c.fast()
	switch w {
	case "queue":
	case "notify":
		d += watchCap
	default:
		d += pollCap
	}
	return d
}

// The portable layer's wait caps (locker.go: pollMax, watchMax).
const (
	pollCap  = 100 * time.Millisecond
	watchCap = time.Second
)

// ttl returns the base TTL.
func (c *caseT) ttl() time.Duration { return c.cfg.ttl }

// withTimeout returns a context for one blocking call.
func (c *caseT) withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, d)
}

// endingContext returns a context that ends after patience as mode says
// ("deadline": its deadline passes; "cancel": it is cancelled) and the
// error a call given it must return then.
func (c *caseT) endingContext(mode string, patience time.Duration) (context.Context, context.CancelFunc, error) {
	if mode == "deadline" {
		ctx, cancel := context.WithTimeout(c.ctx, patience)
		return ctx, cancel, context.DeadlineExceeded
	}
	ctx, cancel := context.WithCancel(c.ctx)
	time.AfterFunc(patience, cancel)
	return ctx, cancel, context.Canceled
}

// checkEnded checks what a call (what, in failures) whose context ended
// at ctxEnd as mode says returned: want, within the fast bound.
func (c *caseT) checkEnded(what, mode string, r acq, want error, ctxEnd time.Time) {
	if !errors.Is(r.err, want) {
		c.Errorf("%s (%s) returned %v, want %v", what, mode, r.err, want)
	}
	if late := r.at.Sub(ctxEnd); late > c.fast() {
		c.Errorf("%s (%s) returned %v after its context ended, bound %v", what, mode, late, c.fast())
	}
}

// reportDir returns the directory for failure artefacts ("" means
// os.TempDir()).
func (c *caseT) reportDir() string { return c.cfg.reportDir }
