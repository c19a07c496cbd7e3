package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/dlock-go/dlock/internal/testenv"
)

// Alternating measurement of the uncontended workload.
//
// Run one after another, targets meet different machines: a burst of load
// (another process, a compaction, an fsync storm) lands on the target that
// happens to run then, and a ratio of two targets measured seconds apart
// measures the burst as much as the targets (three runs of one tree gave
// Redis ×floor 0.84, 1.04 and 2.23). RunAlternating instead keeps one
// client of every target open in this process and lets them take turns in
// short slices, over several rounds: whatever the machine does, it does to
// every target alike, and round r of every target is the same stretch of
// time, so ratios can be taken round by round.

// AlternatingRounds is the number of rounds of a full run: with 30
// rounds the order-statistic interval of the median at 95 % runs from the
// 10th to the 21st of the sorted round values, so nine unlucky rounds at
// either end do not move it. Rounds cost nothing extra here (the clients
// stay open), and more of them matter on a machine whose state changes
// every second or so: on this project's 2-CPU VM a client that hands
// work to another goroutine on each operation (dlock's lease, redsync's
// per-pool goroutines) runs at one of two speeds depending on where the
// scheduler places it, and with 15 rounds the median of the ratios moved
// by up to 19 % between two runs. Fewer than 6 rounds cannot give 95 % at
// all.
const AlternatingRounds = 30

// sliceTime is the length of one target's turn. Within a round, the
// targets of one server (the rows whose ratios are taken: a dlock row, its
// floor, its peers, its round trip) take all their turns together before
// the next server's: a turn through them lasts about n × sliceTime (16 ms
// for the eight of one Redis server), so a load burst, or the machine's
// change of speed (on the project's 2-core VM a Redis round trip takes
// 17 µs or 55 µs from one stretch of milliseconds to the next, every
// client alike), hits a row and the figures it is divided by alike, rather than
// the one or two that happened to be running. Turns through every target
// of the run (some 45 of them, a turn of 100 ms or more) put a row and
// its floor that far apart: over three alternated whole-suite pairs the
// median interval of ×floor was 9.6, 13.2, 12.9 % that way and 8.2, 7.9,
// 6.6 % with a server's turns together. Yet 2 ms is 20–60 operations on
// Redis, so the costs of switching (one untimed warm-up operation, two
// server samples) stay outside and small beside the timed work. An
// operation slower than a slice (a durable SQL commit) makes a slice of
// one operation; the target then sits out turns until the others' share
// of the round's time catches up with its own (see RunAlternating), so its
// time stays spread over the round instead of piling up at its start.
//
// Not one operation per turn: then every timed operation pays the
// aftermath of another target's (work that outlives an operation: a
// release's clean-up, goroutines winding down, a server finishing a write)
// and the wake-up of an idle client and server thread, costs that a loop
// running alone never pays. On Redis it made the floor ~20 % slower than
// in slices, so a constant was added to both sides of every ratio and
// ratios shrank towards 1. A slice pays that once, in its untimed first
// operation.
const sliceTime = 2 * time.Millisecond

// opTimeout bounds one uncontended acquire: the name is the target's own
// and free, so an acquire that takes longer has met a server that stopped
// answering, and the target's slice ends rather than the whole run.
const opTimeout = 5 * time.Second

// Failure handling: a target whose acquires fail failStreak slices in a
// row sits out the rest of the round, and one whose rounds give no grant
// giveUpRounds times in a row is not run again. A server that hangs then
// costs the others at most failStreak × giveUpRounds × opTimeout.
const (
	failStreak   = 3
	giveUpRounds = 2
)

// RunAlternating measures the uncontended workload w on every target at
// once, in one process: one client per target, warmed up, then rounds ×
// servers × turns × (each of the server's targets runs a short slice). It
// returns, per target name, one *Result per round (nil for a round the
// target failed), and per target a reason when the target could not be
// measured at all.
//
// Each target gets about w.Duration of measured time in all, w.Duration /
// rounds per round (AlternatingRounds is the suggested count), cut into
// slices of about sliceTime; within round r the servers (Target.Server)
// come in GroupedRotation order, and each runs all its turns through its
// targets, in that order too, before the next (the order changes from
// round to round, so that which target runs after which is one more thing
// the rounds vary and the interval over rounds absorbs). No other
// target's operation runs during a target's slice. Each slice starts
// with one untimed acquire and release (it absorbs the wake-up of a
// client, a connection and a server thread that sat idle while the other
// targets ran, which a loop running alone never pays); then the
// server's counters are read (sample(t), if sample and its result are not
// nil), the timed operations run, and the counters are read again, so
// commands and CPU per grant stay the target's own although targets of one
// server interleave. A Result's Elapsed is the sum of the target's timed
// slices; its Acquire and Release histograms are the timed operations;
// Handoff (one client hands nothing over) and, when w.Hold is 0, Hold are
// empty; Exclusion and Fencing come from a private Checker per target
// (with one client, a broken lock shows as fencing violations: repeated
// tokens).
//
// w must have one client and one name. A target whose client cannot be
// opened or warmed up gets a reason and no results; a target that fails
// later gets nil for the rounds in which it made no grant (errors of rounds
// that made some are counted in their Results), and a reason as well when
// it made none in any round. One target's failure never stops the others.
// When ctx ends, RunAlternating returns ctx's error promptly; every client
// is closed before it returns.
func RunAlternating(ctx context.Context, targets []Target, w Workload, rounds int,
	sample func(Target) func(context.Context) ServerSample) (map[string][]*Result, map[string]string, error) {
	if w.Clients != 1 || w.Names != 1 {
		return nil, nil, fmt.Errorf("bench: alternating runs one client on one name; %s has %d clients and %d names", w.Label(), w.Clients, w.Names)
	}
	if rounds < 1 {
		return nil, nil, fmt.Errorf("bench: alternating needs at least one round, not %d", rounds)
	}
	seen := map[string]bool{}
	for _, t := range targets {
		if seen[t.Name] {
			return nil, nil, fmt.Errorf("bench: two targets named %q", t.Name)
		}
		seen[t.Name] = true
	}
	prefix := fmt.Sprintf("dlockbench-%04x-alt", rand.Uint32()&0xffff)
	alts, reasons, err := openAlternates(ctx, targets, prefix, w)
	defer func() {
		for _, a := range alts {
			if a != nil {
				a.c.Close()
			}
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	for _, a := range alts {
		if a != nil && sample != nil {
			a.sample = sample(a.t)
		}
	}
	results := map[string][]*Result{}
	for _, a := range alts {
		if a != nil {
			results[a.t.Name] = make([]*Result, rounds)
		}
	}
	group := make([]string, len(alts))
	for i, t := range targets {
		group[i] = t.Server
	}
	budget := w.Duration / time.Duration(rounds)
	turns := max(1, int((budget+sliceTime-1)/sliceTime))
	for r := range rounds {
		for _, a := range alts {
			if a != nil && !a.gaveUp {
				a.startRound(w)
			}
		}
		// A server's targets take all the round's turns together (see
		// sliceTime), the servers in GroupedRotation order.
		for _, run := range groupRuns(GroupedRotation(group, r), group) {
			for k := range turns {
				// After turn k each target has had (k+1)/turns of its
				// share of the round.
				goal := time.Duration(int64(budget) * int64(k+1) / int64(turns))
				for _, i := range run {
					if a := alts[i]; a != nil && !a.gaveUp {
						if err := a.slice(ctx, w, goal); err != nil {
							return nil, nil, err
						}
					}
				}
			}
		}
		for _, a := range alts {
			if a != nil && !a.gaveUp {
				results[a.t.Name][r] = a.endRound()
			}
		}
	}
	for _, a := range alts {
		if a != nil && a.everGranted == 0 {
			reasons[a.t.Name] = "no grant in any round: " + a.lastErr
			delete(results, a.t.Name)
		}
	}
	return results, reasons, nil
}

// alternate is one target's client and its state across rounds.
type alternate struct {
	t      Target
	c      Client
	fenced bool
	name   string
	sample func(context.Context) ServerSample
	// chk lives as long as the client, so that fencing is checked across
	// slices and rounds; a round's violations are the difference.
	chk *Checker

	cur                  *Result // the round being measured
	exclusion0, fencing0 uint64  // the checker's counts when it started
	out                  bool    // sits out the rest of the round
	streak               int     // slices in a row whose acquire failed
	emptyRounds          int     // rounds in a row without a grant
	gaveUp               bool
	everGranted          uint64
	lastErr              string
	// hasCommands and hasCPU: every sample of the round had the counter.
	hasCommands, hasCPU, sampled bool
	slices                       int // slices run, for sampleEvery
	// used counts the fresh names used (Workload.Fresh).
	used uint64
}

// The server's counters are read around every sampleEvery-th slice of a
// target (and its first of each round); the per-grant figures divide by
// the grants the readings surround (ServerSample.Grants). A reading is a
// round trip to Redis (INFO) and a read of every server process's
// /proc/<pid>/stat (the tree listed once a second; dlockbench's
// Server.SampleSteady): around every 2 ms slice it made the uncontended
// workload of a full run take 5m43s instead of 2m20s; one slice in four
// still sums hundreds of readings per target, enough for CPU time
// counted in 10 ms clock ticks. Tests that follow the turns through the
// readings set it to 1.
var sampleEvery = 4

// openAlternates opens and warms one client per target, all at once (the
// warm-up of one server does not wait for another's). A target that fails
// gets a reason and a nil entry. A client that ignores its context is
// abandoned after connectTimeout + stopGrace, as in runPart.
func openAlternates(ctx context.Context, targets []Target, prefix string, w Workload) ([]*alternate, map[string]string, error) {
	type opened struct {
		i   int
		c   Client
		err error
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	ch := make(chan opened, len(targets))
	alts := make([]*alternate, len(targets))
	for i, t := range targets {
		name := fmt.Sprintf("%s%d-k0", prefix, i)
		alts[i] = &alternate{t: t, name: name}
		go func() {
			c, err := Open(cctx, t)
			if err == nil {
				// The measured name itself is warmed: connection, session,
				// scripts, prepared statements, and the name's key or row.
				if err = warmUp(cctx, c, name, w.Duration/10); err != nil {
					c.Close()
					c = nil
				}
			}
			ch <- opened{i, c, err}
		}()
	}
	reasons := map[string]string{}
	timer := time.NewTimer(connectTimeout + stopGrace)
	defer timer.Stop()
	got := make([]bool, len(targets))
	for range targets {
		select {
		case o := <-ch:
			got[o.i] = true
			if o.err != nil {
				reasons[targets[o.i].Name] = "connect and warm up: " + o.err.Error()
				alts[o.i] = nil
				continue
			}
			alts[o.i].c = o.c
			alts[o.i].fenced = fencing(o.c)
			alts[o.i].chk = NewChecker(1)
		case <-timer.C:
			for i, ok := range got {
				if !ok {
					reasons[targets[i].Name] = fmt.Sprintf("%v: connecting and warming up did not end within %v", ErrStuck, connectTimeout+stopGrace)
					alts[i] = nil
				}
			}
			// Those that still arrive are closed as they come; the
			// goroutines of clients that never return are abandoned.
			go func(left int) {
				for range left {
					if o := <-ch; o.c != nil {
						o.c.Close()
					}
				}
			}(len(targets) - countTrue(got))
			return alts, reasons, ctx.Err()
		}
	}
	return alts, reasons, ctx.Err()
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// emptyHist stands for a histogram an uncontended run never fills: a full
// one is 230 kB, and 25 targets × 15 rounds would hold 86 MB of zeros.
func emptyHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, 2, 1) }

func (a *alternate) startRound(w Workload) {
	a.cur = &Result{Target: a.t, Workload: w, Acquire: newHist(), Release: newHist(), Handoff: emptyHist(),
		Hold: emptyHist(), Grants: []uint64{0}, Procs: 1}
	if w.Hold > 0 {
		a.cur.Hold = newHist()
	}
	a.exclusion0, a.fencing0 = a.chk.Violations()
	a.out, a.streak = false, 0
	a.hasCommands, a.hasCPU, a.sampled = true, true, false
}

// endRound returns the round's Result, or nil when it made no grant.
func (a *alternate) endRound() *Result {
	res := a.cur
	a.cur = nil
	ex, fe := a.chk.Violations()
	res.Exclusion, res.Fencing = ex-a.exclusion0, fe-a.fencing0
	res.Server.HasCommands = a.sampled && a.hasCommands
	res.Server.HasCPU = a.sampled && a.hasCPU
	if !res.Server.HasCommands {
		res.Server.Commands = 0
	}
	if !res.Server.HasCPU {
		res.Server.CPU = 0
	}
	if res.Grants[0] == 0 {
		if a.emptyRounds++; a.emptyRounds >= giveUpRounds {
			a.gaveUp = true
		}
		return nil
	}
	a.emptyRounds = 0
	a.everGranted += res.Grants[0]
	return res
}

// slice runs the target's turn: operations until its measured time in
// this round reaches goal (at least one, none when it is there already).
// It returns an error only when ctx has ended.
func (a *alternate) slice(ctx context.Context, w Workload, goal time.Duration) error {
	res := a.cur
	if a.out || res.Elapsed >= goal {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, opTimeout)
	err := warmUp(wctx, a.c, a.name, 0)
	cancel()
	if err != nil {
		return a.failed(ctx, err)
	}
	var before ServerSample
	sampling := a.sample != nil && (a.slices%sampleEvery == 0 || !a.sampled)
	a.slices++
	if sampling {
		before = a.sample(ctx)
	}
	grants0 := res.Grants[0]
	failed0 := a.c.FailedAttempts()
	start := Now()
	var opErr error
	for {
		if opErr = a.op(ctx, w); opErr != nil {
			break
		}
		if res.Elapsed+time.Duration(Now()-start) >= goal || ctx.Err() != nil {
			break
		}
	}
	res.Elapsed += time.Duration(Now() - start)
	res.Failed += a.c.FailedAttempts() - failed0
	if sampling {
		d := a.sample(ctx).Sub(before)
		a.sampled = true
		res.Server.Grants += res.Grants[0] - grants0
		a.hasCommands = a.hasCommands && d.HasCommands
		a.hasCPU = a.hasCPU && d.HasCPU
		res.Server.Commands += d.Commands
		res.Server.CPU += d.CPU
	}
	if opErr != nil {
		return a.failed(ctx, opErr)
	}
	a.streak = 0
	return ctx.Err()
}

// failed counts a failed acquire and ends the slice; it returns ctx's
// error when that is why the acquire failed.
func (a *alternate) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	a.cur.Errors++
	a.lastErr = err.Error()
	a.cur.LastErr = a.lastErr
	if a.streak++; a.streak >= failStreak {
		a.out = true
	}
	return nil
}

// op is one timed acquire, check and release, as Part.loop does them. It
// returns the acquire's error; a release's error is counted, not returned
// (the grant was made).
func (a *alternate) op(ctx context.Context, w Workload) error {
	res := a.cur
	name, fenced := a.name, a.fenced
	if w.Fresh {
		// A name no client has used: the target's own name with a
		// sequence number. Its one holder has no predecessor whose token
		// its own must exceed (tokens are per name on most backends, so a
		// fresh name's may well be lower than the last name's).
		a.used++
		name, fenced = a.name+"-f"+strconv.FormatUint(a.used, 36), false
	}
	actx, cancel := context.WithTimeout(ctx, opTimeout)
	s0 := Now()
	h, err := a.c.Acquire(actx, name)
	got := Now()
	cancel()
	if err != nil {
		return err
	}
	lat := got - s0
	record(res.Acquire, lat)
	res.MaxWait = max(res.MaxWait, lat)
	// One client: nobody hands the name over, so there is no handoff.
	a.chk.Enter(0, h.Token(), fenced, s0, got)
	res.Grants[0]++
	if w.Hold > 0 {
		h0 := Now()
		testenv.Hold(w.Hold)
		record(res.Hold, Now()-h0)
	}
	a.chk.Exit(0)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	r0 := Now()
	err = h.Release(rctx)
	record(res.Release, Now()-r0)
	rcancel()
	if err != nil {
		res.Errors++
		a.lastErr = "release: " + err.Error()
		res.LastErr = a.lastErr
	}
	if w.Work > 0 {
		sleepCtx(ctx, w.Work)
	}
	return nil
}

// groupRuns cuts order into its runs of targets of one group.
func groupRuns(order []int, group []string) [][]int {
	var runs [][]int
	for j, i := range order {
		if j == 0 || group[i] != group[order[j-1]] {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], i)
	}
	return runs
}
