package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

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
	// Hold is what each hold really took (Workload.Hold asked for).
	Hold *hdrhistogram.Histogram
	// Settle is what settling before the timed slices took (Quiet), and
	// Background what the other servers did during them (Runner.Run
	// only).
	Settle     SettleWait
	Background *Background
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
	// Quiet, if not nil, settles the other servers before each timed
	// slice (Quiet.Settle, every server but the target's) and watches
	// them during it.
	Quiet *Quiet

	id    string
	seq   int
	names map[nameSet]*nameState
}

// nameSet identifies the lock names of a target's runs: a target's runs
// on workloads with as many names use the same names.
type nameSet struct {
	target string
	n      int
}

// nameState is a name prefix and whether its names are warm.
type nameState struct {
	prefix string
	warm   bool
}

// Run measures t on w. sample, if not nil, reads the server's counters
// before and after the measured time. With r.Quiet, once every client is
// connected and warm, Run waits for the other servers to settle before
// the measured time starts, and reads what they do during it.
//
// Every name of w is taken and freed once before the measured time
// (Part.WarmNames), so that the first use of a name (an inserted row, a
// created node) is not measured. When w has more names than clients, so
// that warming them is costly (10 000 first uses take seconds on the SQL
// servers), every run of the target on workloads with as many names (the
// rounds of a workload, and the workloads of one shape) uses the same
// names, warmed by the first run only. Otherwise each run has names of
// its own, warmed anew: a hot name never inherits what the end of the
// previous run left on it (an acquire cancelled half-way, as redsync
// leaves on the masters it reached, blocks its name until the lease
// expires). A name is never shared by two targets.
func (r *Runner) Run(ctx context.Context, t Target, w Workload, sample func(context.Context) ServerSample) (*Result, error) {
	if r.id == "" {
		r.id = fmt.Sprintf("%04x", rand.Uint32()&0xffff)
		r.names = map[nameSet]*nameState{}
	}
	key := nameSet{t.Name, w.Names}
	ns := r.names[key]
	if ns == nil || w.Names <= w.Clients {
		r.seq++
		ns = &nameState{prefix: fmt.Sprintf("dlockbench-%s-%d", r.id, r.seq)}
		r.names[key] = ns
	}
	base := Part{Target: t, Workload: w, Prefix: ns.prefix, Seed: rand.Uint64(), WarmNames: !ns.warm}
	procs := min(max(r.Procs, 1), w.Clients)
	if t.InProcessOnly {
		procs = 1
	}
	var (
		before, after ServerSample
		settle        SettleWait
		watch         func() Background
		background    *Background
	)
	takeBefore := func() {
		if r.Quiet != nil {
			settle = r.Quiet.Settle(ctx, t.Server)
			watch = r.Quiet.Watch(t.Server)
		}
		if sample != nil {
			before = sample(ctx)
		}
	}
	takeAfter := func() {
		if sample != nil {
			after = sample(ctx)
		}
		if watch != nil {
			b := watch()
			background = &b
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
	ns.warm = true
	res := &Result{Target: t, Workload: w, Acquire: newHist(), Release: newHist(), Handoff: newHist(), Hold: newHist(), Procs: procs,
		Settle: settle, Background: background}
	for _, pr := range results {
		for _, pair := range []struct {
			dst *hdrhistogram.Histogram
			enc string
		}{{res.Acquire, pr.Acquire}, {res.Release, pr.Release}, {res.Handoff, pr.Handoff}, {res.Hold, pr.Hold}} {
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
