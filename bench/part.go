package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/dlock-go/dlock/internal/testenv"
)

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
	// WarmNames makes the part take and free its share of the workload's
	// names once before the measured time (see warmNames).
	WarmNames bool `json:"warm_names,omitempty"`
}

// PartResult is what a part measured. Histograms are HdrHistogram V2
// compressed encodings, so parts of other processes merge exactly.
type PartResult struct {
	Acquire string `json:"acquire"`
	Release string `json:"release"`
	Handoff string `json:"handoff"`
	// Hold is what each hold really took.
	Hold string `json:"hold"`
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
	acq, rel, handoff, hold *hdrhistogram.Histogram
	grants, errors          uint64
	lastErr                 string
	maxWait                 int64
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

// warmNames takes and frees, once each, the names of the workload that
// fall to client g of n (names g, g+n, g+2n…): the clients of every part
// together touch every name once, in parallel, without contending. The
// first use of a name costs more than the next ones on most servers (an
// inserted row, a created parent node, a new key); a name used in the
// measured time is then as warm as its neighbours.
func warmNames(ctx context.Context, c Client, names []string, g, n int) error {
	for j := g; j < len(names); j += n {
		h, err := c.Acquire(ctx, names[j])
		if err != nil {
			return err
		}
		if err := h.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// stopGrace is how long clients may take to notice the end of a run
// before their connections are closed under them, and then again before
// they are given up as stuck. connectTimeout bounds connecting and warming
// up all the clients of a part; warmNamesTimeout bounds their taking and
// freeing every name of the workload once (Part.WarmNames).
var (
	stopGrace        = 5 * time.Second // a variable for tests
	connectTimeout   = 30 * time.Second
	warmNamesTimeout = time.Minute
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
	names := p.names()
	if p.WarmNames {
		if err := p.warmAllNames(ctx, clients, names); err != nil {
			closeAll()
			return nil, err
		}
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
	stats := make([]*clientStats, p.Count)
	for i, c := range clients {
		stats[i] = &clientStats{acq: newHist(), rel: newHist(), handoff: newHist(), hold: newHist()}
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
	acq, rel, ho, hold := newHist(), newHist(), newHist(), newHist()
	for i, st := range stats {
		acq.Merge(st.acq)
		rel.Merge(st.rel)
		ho.Merge(st.handoff)
		hold.Merge(st.hold)
		res.Grants[i] = st.grants
		res.Errors += st.errors
		if st.lastErr != "" {
			res.LastError = st.lastErr
		}
		res.MaxWait = max(res.MaxWait, st.maxWait)
		res.Failed += clients[i].FailedAttempts()
	}
	for _, e := range []struct {
		dst *string
		h   *hdrhistogram.Histogram
	}{{&res.Acquire, acq}, {&res.Release, rel}, {&res.Handoff, ho}, {&res.Hold, hold}} {
		var err error
		if *e.dst, err = encode(e.h); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// warmAllNames has every client of the part warm its share of the names
// (warmNames), in parallel, outside the measured time.
func (p Part) warmAllNames(ctx context.Context, clients []Client, names []string) error {
	wctx, cancel := context.WithTimeout(ctx, warmNamesTimeout)
	defer cancel()
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() { errs[i] = warmNames(wctx, c, names, p.First+i, p.Workload.Clients) })
	}
	if !waitDone(goDone(&wg), warmNamesTimeout+stopGrace) {
		return fmt.Errorf("bench: %s: %w: warming %d names did not end within %v", p.Target.Name, ErrStuck, len(names), warmNamesTimeout+stopGrace)
	}
	if err := firstErr(errs); err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("bench: %s: %w: warming %d names took over %v: %w", p.Target.Name, ErrStuck, len(names), warmNamesTimeout, err)
		}
		return fmt.Errorf("bench: %s: warm names: %w", p.Target.Name, err)
	}
	return nil
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
			h0 := Now()
			testenv.Hold(w.Hold)
			record(st.hold, Now()-h0)
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
