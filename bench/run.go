package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: 1 ns to 100 s at 3 significant digits.
const (
	histMin    = 1
	histMax    = int64(100 * time.Second)
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

func record(h *hdrhistogram.Histogram, v int64) {
	_ = h.RecordValue(min(max(v, histMin), histMax))
}

// Part is the share of a run's clients that one process drives.
type Part struct {
	Target   Target   `json:"target"`
	Workload Workload `json:"workload"`
	// Prefix starts every lock name of the run, so that runs never share
	// a name (nor a stale lease of an earlier run).
	Prefix string `json:"prefix"`
	// First is the index of this part's first client; Count its clients.
	First int `json:"first"`
	Count int `json:"count"`
	// Checker is the shared checker file ("" for a private checker).
	Checker string `json:"checker,omitempty"`
	Seed    uint64 `json:"seed"`
}

// PartResult is what a part measured. Histograms are HdrHistogram V2
// compressed encodings, so parts of other processes merge exactly.
type PartResult struct {
	Acquire string `json:"acquire"`
	Release string `json:"release"`
	Handoff string `json:"handoff"`
	// Grants per client, in client order.
	Grants []uint64 `json:"grants"`
	// Errors: acquires or releases that failed (not counting the end of the run).
	Errors    uint64 `json:"errors"`
	LastError string `json:"last_error,omitempty"`
	// Failed: attempts that found the lock taken and retried.
	Failed  uint64 `json:"failed"`
	MaxWait int64  `json:"max_wait"`
	// Elapsed is the measured time in nanoseconds.
	Elapsed int64 `json:"elapsed"`
}

// hooks connect a part to whoever coordinates the run.
type hooks struct {
	ready   func()          // every client has connected and warmed up
	start   <-chan struct{} // closed (or sent on) to start the measured time
	stopped func()          // the measured time is over (clients not yet closed)
}

type clientStats struct {
	acq, rel, handoff *hdrhistogram.Histogram
	grants, errors    uint64
	lastErr           string
	maxWait           int64
}

func (p Part) names() []string {
	ns := make([]string, p.Workload.Names)
	for i := range ns {
		ns[i] = fmt.Sprintf("%s-k%d", p.Prefix, i)
	}
	return ns
}

// warmUp takes and frees a name of the client's own for up to d (at
// least once, at most 100 ms): connections, sessions, loaded scripts,
// prepared statements and the server's JIT are warm when the measured
// time starts.
func warmUp(ctx context.Context, c Client, name string, d time.Duration) error {
	end := time.Now().Add(min(d, 100*time.Millisecond))
	for {
		h, err := c.Acquire(ctx, name)
		if err != nil {
			return err
		}
		if err := h.Release(ctx); err != nil {
			return err
		}
		if !time.Now().Before(end) {
			return nil
		}
	}
}

// stopGrace is how long clients may take to notice the end of a run
// before their connections are closed under them, and then again before
// they are given up as stuck. connectTimeout bounds connecting and warming
// up all the clients of a part.
var (
	stopGrace      = 5 * time.Second // a variable for tests
	connectTimeout = 30 * time.Second
)

// ErrStuck is wrapped by the errors of runs whose clients did not connect
// and warm up in time, or did not stop: dlockbench stops measuring that
// target.
var ErrStuck = errors.New("clients stuck")

// waitDone waits for done, at most d; it reports whether done closed.
func waitDone(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// firstErr returns the first error and how many clients failed.
func firstErr(errs []error) error {
	var first error
	n := 0
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%w (and %d more clients)", first, n-1)
	}
	return first
}

// goDone runs wg.Wait in a goroutine and closes the returned channel.
func goDone(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

func runPart(ctx context.Context, p Part, chk *Checker, hk hooks) (*PartResult, error) {
	clients := make([]Client, p.Count)
	errs := make([]error, p.Count)
	var wg sync.WaitGroup
	cctx, ccancel := context.WithTimeout(ctx, connectTimeout)
	defer ccancel()
	for i := range clients {
		wg.Go(func() {
			c, err := Open(cctx, p.Target)
			if err == nil {
				if err = warmUp(cctx, c, fmt.Sprintf("%s-w%d", p.Prefix, p.First+i), p.Workload.Duration/10); err != nil {
					c.Close()
					c = nil
				}
			}
			clients[i], errs[i] = c, err
		})
	}
	if !waitDone(goDone(&wg), connectTimeout+stopGrace) {
		// A client ignores its context: give the part up (its goroutines
		// are abandoned; the connections that did open are left to them).
		return nil, fmt.Errorf("bench: %s: %w: connecting and warming up %d clients did not end within %v", p.Target.Name, ErrStuck, p.Count, connectTimeout+stopGrace)
	}
	closeAll := func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}
	if err := firstErr(errs); err != nil {
		closeAll()
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("bench: %s: %w: connecting and warming up %d clients took over %v: %w", p.Target.Name, ErrStuck, p.Count, connectTimeout, err)
		}
		return nil, fmt.Errorf("bench: %s: connect and warm up: %w", p.Target.Name, err)
	}
	hk.ready()
	select {
	case <-hk.start:
	case <-ctx.Done():
		closeAll()
		return nil, ctx.Err()
	}

	start := Now()
	rctx, cancel := context.WithTimeout(ctx, p.Workload.Duration)
	defer cancel()
	names := p.names()
	stats := make([]*clientStats, p.Count)
	for i, c := range clients {
		stats[i] = &clientStats{acq: newHist(), rel: newHist(), handoff: newHist()}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(p.Seed, uint64(p.First+i)))
			p.loop(rctx, c, fencing(c), chk, names, stats[i], rng, start)
		})
	}
	loopsDone := goDone(&wg)
	<-rctx.Done()
	elapsed := Now() - start
	if !waitDone(loopsDone, stopGrace) {
		closeAll() // unblocks waiters that ignore their context
		if !waitDone(loopsDone, stopGrace) {
			hk.stopped()
			return nil, fmt.Errorf("bench: %s: %w: still in acquire or release %v after the end of the run, even with their connections closed", p.Target.Name, ErrStuck, 2*stopGrace)
		}
	}
	hk.stopped()
	closeAll()

	res := &PartResult{Elapsed: elapsed, Grants: make([]uint64, p.Count)}
	acq, rel, ho := newHist(), newHist(), newHist()
	for i, st := range stats {
		acq.Merge(st.acq)
		rel.Merge(st.rel)
		ho.Merge(st.handoff)
		res.Grants[i] = st.grants
		res.Errors += st.errors
		if st.lastErr != "" {
			res.LastError = st.lastErr
		}
		res.MaxWait = max(res.MaxWait, st.maxWait)
		res.Failed += clients[i].FailedAttempts()
	}
	var err error
	if res.Acquire, err = encode(acq); err != nil {
		return nil, err
	}
	if res.Release, err = encode(rel); err != nil {
		return nil, err
	}
	if res.Handoff, err = encode(ho); err != nil {
		return nil, err
	}
	return res, nil
}

func encode(h *hdrhistogram.Histogram) (string, error) {
	b, err := h.EncodeV2()
	return string(b), err
}

// sleepCtx sleeps for d or until ctx ends; it reports whether ctx is live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// releaseTimeout bounds a release, which runs on a fresh context so that
// the end of the run never leaves a lock held.
const releaseTimeout = 10 * time.Second

// loop is one client's life: acquire, check, hold, release, work, again.
func (p Part) loop(ctx context.Context, c Client, fenced bool, chk *Checker, names []string, st *clientStats, rng *rand.Rand, start int64) {
	w := p.Workload
	next := start
	var perClient float64
	if w.Kind == OpenLoop && w.Rate > 0 {
		perClient = w.Rate / float64(w.Clients)
	}
	for ctx.Err() == nil {
		i := 0
		if len(names) > 1 {
			i = rng.IntN(len(names))
		}
		s0 := Now()
		intended := s0
		if perClient > 0 {
			// Poisson arrivals: exponential gaps from the previous intended
			// start, whatever happened to it (no coordinated omission).
			// Latency counts from the intended start when the client was
			// still busy with earlier requests then (the queueing a slow
			// server causes); when it was idle, from the actual start, so
			// that the timer's lateness in waking it (the harness's, not
			// the server's) is not counted.
			next += int64(rng.ExpFloat64() / perClient * 1e9)
			busy := s0 >= next
			if gap := time.Duration(next - s0); gap > 0 && !sleepCtx(ctx, gap) {
				return
			}
			s0 = Now()
			intended = s0
			if busy {
				intended = next
			}
		}
		h, err := c.Acquire(ctx, names[i])
		got := Now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			st.errors++
			st.lastErr = err.Error()
			sleepCtx(ctx, time.Millisecond)
			continue
		}
		lat := got - intended
		record(st.acq, lat)
		st.maxWait = max(st.maxWait, lat)
		if ho := chk.Enter(i, h.Token(), fenced, s0, got); ho >= 0 {
			record(st.handoff, ho)
		}
		st.grants++
		if w.Hold > 0 {
			time.Sleep(w.Hold)
		}
		chk.Exit(i)
		r0 := Now()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		err = h.Release(rctx)
		cancel()
		record(st.rel, Now()-r0)
		if err != nil {
			st.errors++
			st.lastErr = "release: " + err.Error()
		}
		if w.Work > 0 && !sleepCtx(ctx, w.Work) {
			return
		}
	}
}

// Result is a whole run of one target on one workload, all parts merged.
type Result struct {
	Target   Target
	Workload Workload
	Acquire  *hdrhistogram.Histogram
	Release  *hdrhistogram.Histogram
	Handoff  *hdrhistogram.Histogram
	Grants   []uint64
	Errors   uint64
	LastErr  string
	Failed   uint64
	MaxWait  int64
	Elapsed  time.Duration
	// Exclusion and Fencing count mutual-exclusion and fencing violations.
	Exclusion, Fencing uint64
	// Server is the server's work during the measured time.
	Server ServerDelta
	Procs  int
}

// Runner runs targets on workloads, in this process or, with Procs > 1,
// in child processes that re-execute this program.
type Runner struct {
	// Procs is the number of client processes (0 or 1: goroutines here).
	Procs int
	// Exe and Args re-execute this program as a child (see ChildMain);
	// Exe defaults to os.Executable().
	Exe  string
	Args []string
	// Stderr receives the children's stderr.
	Stderr io.Writer

	id  string
	seq int
}

// ChildEnv is the environment variable that makes a process a client part.
const ChildEnv = "DLOCKBENCH_CHILD"

// Run measures t on w. sample, if not nil, reads the server's counters
// before and after the measured time.
func (r *Runner) Run(ctx context.Context, t Target, w Workload, sample func(context.Context) ServerSample) (*Result, error) {
	if r.id == "" {
		r.id = fmt.Sprintf("%04x", rand.Uint32()&0xffff)
	}
	r.seq++
	base := Part{Target: t, Workload: w, Prefix: fmt.Sprintf("dlockbench-%s-%d", r.id, r.seq), Seed: rand.Uint64()}
	procs := min(max(r.Procs, 1), w.Clients)
	if t.InProcessOnly {
		procs = 1
	}
	var before, after ServerSample
	takeBefore := func() {
		if sample != nil {
			before = sample(ctx)
		}
	}
	takeAfter := func() {
		if sample != nil {
			after = sample(ctx)
		}
	}
	var (
		results []*PartResult
		chk     *Checker
		err     error
	)
	if procs == 1 {
		chk = NewChecker(w.Names)
		start := make(chan struct{})
		p := base
		p.Count = w.Clients
		var res *PartResult
		res, err = runPart(ctx, p, chk, hooks{
			ready:   func() { takeBefore(); close(start) },
			start:   start,
			stopped: takeAfter,
		})
		results = []*PartResult{res}
	} else {
		if chk, err = NewSharedChecker(shmDir(), w.Names); err != nil {
			return nil, err
		}
		defer chk.Close(true)
		results, err = r.runChildren(ctx, base, procs, chk.Path(), takeBefore, takeAfter)
	}
	if err != nil {
		return nil, err
	}
	res := &Result{Target: t, Workload: w, Acquire: newHist(), Release: newHist(), Handoff: newHist(), Procs: procs}
	for _, pr := range results {
		for _, pair := range []struct {
			dst *hdrhistogram.Histogram
			enc string
		}{{res.Acquire, pr.Acquire}, {res.Release, pr.Release}, {res.Handoff, pr.Handoff}} {
			h, err := hdrhistogram.Decode([]byte(pair.enc))
			if err != nil {
				return nil, fmt.Errorf("bench: decode histogram: %w", err)
			}
			pair.dst.Merge(h)
		}
		res.Grants = append(res.Grants, pr.Grants...)
		res.Errors += pr.Errors
		if pr.LastError != "" {
			res.LastErr = pr.LastError
		}
		res.Failed += pr.Failed
		res.MaxWait = max(res.MaxWait, pr.MaxWait)
		res.Elapsed = max(res.Elapsed, time.Duration(pr.Elapsed))
	}
	res.Exclusion, res.Fencing = chk.Violations()
	if sample != nil {
		res.Server = after.Sub(before)
	}
	return res, nil
}

// shmDir is where shared checker files go: memory-backed when possible.
func shmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// runChildren starts procs children, each with its share of the clients,
// and drives them through ready → go → stopped → result.
func (r *Runner) runChildren(ctx context.Context, base Part, procs int, chkPath string, before, after func()) ([]*PartResult, error) {
	exe := r.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	type child struct {
		cmd   *exec.Cmd
		in    io.WriteCloser
		out   *bufio.Reader
		wait  chan error
		lines chan string
	}
	kids := make([]*child, procs)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := 0
	for k := range kids {
		p := base
		p.Checker = chkPath
		p.First = first
		p.Count = base.Workload.Clients / procs
		if k < base.Workload.Clients%procs {
			p.Count++
		}
		first += p.Count
		spec, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(cctx, exe, r.Args...)
		cmd.Env = append(os.Environ(), ChildEnv+"=1")
		cmd.Stderr = r.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		outp, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("bench: start client process: %w", err)
		}
		c := &child{cmd: cmd, in: in, out: bufio.NewReaderSize(outp, 1<<20), wait: make(chan error, 1), lines: make(chan string, 4)}
		kids[k] = c
		go func() {
			for {
				line, err := c.out.ReadString('\n')
				if line != "" {
					c.lines <- strings.TrimSpace(line)
				}
				if err != nil {
					close(c.lines)
					c.wait <- cmd.Wait()
					return
				}
			}
		}()
		if _, err := fmt.Fprintf(in, "%s\n", spec); err != nil {
			return nil, fmt.Errorf("bench: client process: %w", err)
		}
	}
	expect := func(c *child, want string) (string, error) {
		line, ok := <-c.lines
		if !ok {
			err := <-c.wait
			c.wait <- err
			return "", fmt.Errorf("bench: client process ended early: %v", err)
		}
		if err := childErr(line); err != nil {
			return "", err
		}
		if want != "" && line != want {
			return "", fmt.Errorf("bench: client process said %q, want %q", line, want)
		}
		return line, nil
	}
	for _, c := range kids {
		if _, err := expect(c, "ready"); err != nil {
			return nil, err
		}
	}
	before()
	for _, c := range kids {
		fmt.Fprintf(c.in, "go\n")
	}
	for _, c := range kids {
		if _, err := expect(c, "stopped"); err != nil {
			return nil, err
		}
	}
	after()
	var out []*PartResult
	for _, c := range kids {
		line, err := expect(c, "")
		if err != nil {
			return nil, err
		}
		var pr PartResult
		if err := json.Unmarshal([]byte(line), &pr); err != nil {
			return nil, fmt.Errorf("bench: client process result: %w", err)
		}
		out = append(out, &pr)
		c.in.Close()
		if err := <-c.wait; err != nil {
			return nil, fmt.Errorf("bench: client process: %w", err)
		}
	}
	return out, nil
}

// childErr turns a child's "error …" line back into an error (nil for
// any other line).
func childErr(line string) error {
	if msg, ok := strings.CutPrefix(line, "error stuck "); ok {
		return fmt.Errorf("%w: %s", ErrStuck, msg)
	}
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return errors.New(msg)
	}
	return nil
}

// ChildMain runs this process as a client part when the environment says
// so (see Runner.Procs), and exits; otherwise it returns at once. Call it
// first thing in main (and in TestMain of tests that run -procs).
func ChildMain() {
	if os.Getenv(ChildEnv) != "1" {
		return
	}
	os.Exit(child(os.Stdin, os.Stdout))
}

func child(stdin io.Reader, stdout io.Writer) int {
	in := bufio.NewReaderSize(stdin, 1<<16)
	fail := func(err error) int {
		kind := "error "
		if errors.Is(err, ErrStuck) {
			kind = "error stuck "
		}
		fmt.Fprintf(stdout, "%s%s\n", kind, strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	line, err := in.ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("bench: child: read spec: %w", err))
	}
	var p Part
	if err := json.Unmarshal([]byte(line), &p); err != nil {
		return fail(fmt.Errorf("bench: child: spec: %w", err))
	}
	chk, err := OpenChecker(p.Checker)
	if err != nil {
		return fail(err)
	}
	defer chk.Close(false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := make(chan struct{})
	go func() {
		// "go" starts the run; the end of stdin (the parent died) stops it.
		l, err := in.ReadString('\n')
		if err == nil && strings.TrimSpace(l) == "go" {
			close(start)
			_, err = io.Copy(io.Discard, in)
		}
		cancel()
	}()
	res, err := runPart(ctx, p, chk, hooks{
		ready:   func() { fmt.Fprintf(stdout, "ready\n") },
		start:   start,
		stopped: func() { fmt.Fprintf(stdout, "stopped\n") },
	})
	if err != nil {
		return fail(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}
