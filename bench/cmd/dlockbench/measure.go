package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlock-go/dlock/bench"
)

// runOverhead estimates what a run costs beyond its measured time
// (connecting clients, warming up, stopping), for the progress estimate.
const runOverhead = 150 * time.Millisecond

// minSlice is the shortest slice a target runs in one round of a
// contended workload (before -scale): shorter, a slice of the handoff
// workload with a 1 ms hold would hold too few grants to say anything.
const minSlice = 100 * time.Millisecond

// measurer runs the workloads of a run, round by round.
type measurer struct {
	cfg    *config
	e      *env
	r      *bench.Runner
	rounds int
	pb     *progress
	// pacer measures the references of the handoff and fairness rows'
	// ideal in their rounds (bench.Paced).
	pacer *bench.Pacer
	// capacity is a target's many-keys grants/s at 4×GOMAXPROCS clients,
	// the open loop's reference.
	capacity map[string]float64
	// broken says why a target is no longer run: it got stuck.
	broken map[string]string
	// step and steps count the runs for the progress bar; done and total
	// estimate their time.
	step, steps int
	done, total time.Duration
}

// measure runs every workload on every target that takes part in it
// (floors and round trips in the uncontended workload only). Each
// workload runs cfg.rounds rounds; in each round, every target runs one
// slice, in the order bench.GroupedRotation gives (a server's targets
// side by side), so that the targets of a workload alternate and noise
// that slows a round slows all of them
// (Finalize pairs their ratios per round). The uncontended workload
// alternates its targets within one process (bench.RunAlternating). The
// contended ones (but the open loop) run round by round together: round
// r of every one of them, in Rotation order, before round r+1 of any, so
// that each workload's rounds are spread over the whole run and a server
// that drifts over minutes (a JVM's compiler, a cache, the host's other
// tenants) shows in the intervals instead of moving one workload's
// figures between runs. Each target runs a slice of Duration/rounds (at
// least minSlice) per round through the Runner. The open loops run last,
// each on its own, from the capacities the many-keys workload measured.
// One row per target and workload aggregates its rounds
// (bench.AggregateRounds). Each round of a handoff or fairness
// configuration ends with its paced references (bench.Pacer; measured
// once per round and hold), which the second result returns.
func measure(ctx context.Context, cfg *config, e *env, plan []bench.Workload, r *bench.Runner, stderr io.Writer) ([]*bench.Row, []*bench.Paced, error) {
	m := &measurer{cfg: cfg, e: e, r: r, rounds: cfg.rounds, pacer: bench.NewPacer(),
		pb: &progress{w: stderr, on: cfg.progress, start: time.Now()}, capacity: map[string]float64{}, broken: map[string]string{}}
	defer m.pacer.Close()
	m.pacer.Quiet = r.Quiet
	m.estimate(plan)
	if !cfg.progress {
		fmt.Fprintf(stderr, "dlockbench: %d workloads × %d rounds, %d runs, about %v\n", len(plan), m.rounds, m.steps, m.total.Round(time.Second))
	}
	say := func(format string, args ...any) {
		if !cfg.progress {
			fmt.Fprintf(stderr, "dlockbench: "+format+" (%s)\n", append(args, time.Now().Format("15:04:05"))...)
		}
	}
	out := make([][]*bench.Row, len(plan)) // by plan index: the report keeps the plan's order
	var together []*contention
	for i, w := range plan {
		if ctx.Err() != nil {
			break
		}
		switch w.Kind {
		case bench.Uncontended:
			if cfg.pinCPUs == pinUncontended {
				if err := e.pin.pin(); err != nil {
					return nil, nil, err
				}
			}
			say("%s", w.Kind)
			out[i] = m.alternate(ctx, w)
		case bench.OpenLoop, bench.Scale, bench.Semaphore:
		default:
			together = append(together, m.begin(i, w))
		}
	}
	if cfg.pinCPUs == pinUncontended {
		// The contended workloads run many clients: on half the CPUs
		// they are noisier than placed by the kernel.
		e.pin.unpin()
	}
	if len(together) > 0 {
		for round := range m.rounds {
			if ctx.Err() != nil {
				break
			}
			say("contended workloads, round %d of %d", round+1, m.rounds)
			for _, j := range bench.Rotation(len(together), round) {
				m.runRound(ctx, together[j], round)
			}
		}
		for _, c := range together {
			out[c.index] = m.finish(c)
		}
		// The references' clients are done: idle, they would still run
		// beside what follows (a ZooKeeper session's pings beside the
		// leases curve's CPU reading).
		m.pacer.Close()
	}
	for i, w := range plan {
		if w.Kind != bench.OpenLoop || ctx.Err() != nil {
			continue
		}
		say("%s", w.Label())
		c := m.begin(i, w)
		m.probe(ctx, c.targets, c.sw, c.skipped)
		for round := range m.rounds {
			m.runRound(ctx, c, round)
		}
		out[i] = m.finish(c)
	}
	for i, w := range plan {
		if w.Kind != bench.Semaphore || ctx.Err() != nil {
			continue
		}
		say("%s", w.Label())
		out[i] = m.semaphore(ctx, w)
	}
	for i, w := range plan {
		if w.Kind != bench.Scale || ctx.Err() != nil {
			continue
		}
		say("%s", w.Label())
		out[i] = m.scale(ctx, w)
	}
	m.pb.clear()
	var rows []*bench.Row
	for _, o := range out {
		rows = append(rows, o...)
	}
	if err := ctx.Err(); err != nil && len(rows) == 0 {
		return nil, nil, err
	}
	return rows, m.pacer.References(), nil
}

// targets returns the targets that take part in a workload kind.
func (m *measurer) targets(kind string) []bench.Target {
	var out []bench.Target
	for _, t := range m.e.targets {
		if t.Runs(kind) {
			out = append(out, t)
		}
	}
	return out
}

// altRounds is the number of rounds of the uncontended workload: its
// rounds are short slices in one process that cost nothing more when
// there are more of them, and bench.AlternatingRounds of them give a 95 %
// interval that two unlucky rounds at either end do not move.
func (m *measurer) altRounds() int { return max(m.rounds, bench.AlternatingRounds) }

// slice is what one target runs of w in one round.
func (m *measurer) slice(w bench.Workload) time.Duration {
	low := time.Duration(float64(minSlice) * min(m.cfg.scale, 1))
	return max((w.Duration / time.Duration(m.rounds)).Round(time.Millisecond), low)
}

// estimate counts the runs and their time for the progress bar.
func (m *measurer) estimate(plan []bench.Workload) {
	capacity, probed := false, false
	var holds []time.Duration // the holds whose paced references are counted
	for _, w := range plan {
		n := len(m.targets(w.Kind))
		switch {
		case w.Kind == bench.Uncontended:
			m.steps++
			m.total += time.Duration(n) * (w.Duration + runOverhead)
			continue
		case w.Kind == bench.Semaphore:
			// Every dlock target is tried; those without semaphores end
			// at their first client.
			n = len(m.scaleTargets())
			m.steps += n
			m.total += time.Duration(n) * (w.Duration + 2*runOverhead)
			continue
		case w.Kind == bench.Scale:
			n = len(m.scaleTargets())
			m.steps += n
			// The leases curve measures an idle window as well.
			m.total += time.Duration(n) * (2*w.Duration + runOverhead)
			continue
		case w.Kind == bench.ManyKeys && w.Clients == capClients():
			capacity = true
		case w.Kind == bench.OpenLoop && !capacity && !probed:
			probed = true
			m.steps += n
			m.total += time.Duration(n) * (m.slice(w) + runOverhead)
		}
		m.steps += n * m.rounds
		m.total += time.Duration(n*m.rounds) * (m.slice(w) + runOverhead)
		if paced(w) && !slices.Contains(holds, w.Hold) {
			// Each reference, once per round and hold: its samples, each
			// after the hold.
			holds = append(holds, w.Hold)
			refs := len(bench.PacedTargets(m.targets(w.Kind), m.e.targets))
			m.total += time.Duration(refs*m.rounds*bench.PacedSamples) * (w.Hold + 200*time.Microsecond)
		}
	}
}

// paced reports whether w's rows are judged by an ideal whose references
// are measured in its rounds (bench.Paced).
func paced(w bench.Workload) bool { return w.Kind == bench.Handoff || w.Kind == bench.Fairness }

// capClients is the clients of the many-keys workload whose rate is the
// open loop's capacity (the open loop runs as many).
func capClients() int { return 4 * runtime.GOMAXPROCS(0) }

// show advances the progress bar by one run of about d.
func (m *measurer) show(what string, d time.Duration) {
	m.pb.show(m.step, m.steps, m.done, m.total, what)
	m.step++
	m.done += d
}

// alternate measures the uncontended workload: every target's client open
// at once in this process, alternating in short slices, round after round.
func (m *measurer) alternate(ctx context.Context, w bench.Workload) []*bench.Row {
	targets := m.targets(w.Kind)
	m.show(fmt.Sprintf("%d targets · %s", len(targets), w.Label()), time.Duration(len(targets))*(w.Duration+runOverhead))
	sample := func(t bench.Target) func(context.Context) bench.ServerSample { return sampler(m.e, t, true) }
	results, why, err := bench.RunAlternating(ctx, targets, w, m.altRounds(), sample)
	var rows []*bench.Row
	for _, t := range targets {
		var row *bench.Row
		switch {
		case err != nil:
			row = bench.SkippedRow(t, w, err.Error())
		case why[t.Name] != "":
			row = bench.SkippedRow(t, w, why[t.Name])
		default:
			row = m.aggregate(t, w, results[t.Name], nil)
		}
		rows = append(rows, row)
	}
	return rows
}

// scaleTargets are the targets of the scale curves: dlock's (one Locker
// each; the peers have no Locker to grow).
func (m *measurer) scaleTargets() []bench.Target {
	var out []bench.Target
	for _, t := range m.targets(bench.Scale) {
		if t.Kind == bench.KindDlock {
			out = append(out, t)
		}
	}
	return out
}

// scale measures one point of a scale curve on every dlock target, one
// after another (the leases curve reads this process's CPU time, so
// nothing else may run beside it), the names curve beside each target's
// floor.
func (m *measurer) scale(ctx context.Context, w bench.Workload) []*bench.Row {
	var rows []*bench.Row
	for _, t := range m.scaleTargets() {
		if ctx.Err() != nil {
			break
		}
		if why, ok := m.broken[t.Name]; ok {
			rows = append(rows, bench.SkippedRow(t, w, "not run after an earlier failure: "+why))
			continue
		}
		m.show(t.Name+" · "+w.Label(), 2*w.Duration+runOverhead)
		var floor *bench.Target
		if w.Axis == bench.ScaleNames {
			for _, f := range m.e.targets {
				if f.Name == t.Floor && f.Kind == bench.KindFloor {
					floor = &f
				}
			}
		}
		// The other servers settle before the point (not before each of
		// its slices: a point connects its clients and takes its leases
		// first, its own work).
		settle := m.r.Quiet.Settle(ctx, t.Server)
		row, err := bench.RunScale(ctx, t, floor, w, sampler(m.e, t, false))
		if settle.Settles > 0 && row.Skipped == "" {
			row.Settle = &settle
		}
		if err != nil {
			// Each further point would wait out the same limit.
			m.broken[t.Name] = w.Label() + ": " + bench.ErrStuck.Error()
		}
		rows = append(rows, row)
	}
	return rows
}

// semaphore measures the semaphore workload on every dlock target whose
// backend has semaphores, one after another, each beside its backend's
// semaphore floor (bench.RunSemaphore); a target without semaphores has
// no row.
func (m *measurer) semaphore(ctx context.Context, w bench.Workload) []*bench.Row {
	var rows []*bench.Row
	for _, t := range m.scaleTargets() {
		if ctx.Err() != nil {
			break
		}
		if why, ok := m.broken[t.Name]; ok {
			rows = append(rows, bench.SkippedRow(t, w, "not run after an earlier failure: "+why))
			continue
		}
		m.show(t.Name+" · "+w.Label(), w.Duration+2*runOverhead)
		rs, err := bench.RunSemaphore(ctx, t, w, m.rounds, m.r.Quiet)
		if errors.Is(err, bench.ErrStuck) {
			// Each further run would wait out the same limit.
			m.broken[t.Name] = w.Label() + ": " + bench.ErrStuck.Error()
		} else if err != nil {
			continue // no semaphores, or interrupted
		}
		rows = append(rows, rs...)
	}
	return rows
}

// contention is one contended workload being measured round by round.
type contention struct {
	index   int // in the plan
	w       bench.Workload
	sw      bench.Workload // w with one round's slice as its Duration
	targets []bench.Target
	skipped map[string]string          // target → why it has no row
	results map[string][]*bench.Result // target → its rounds (nil where one failed)
	failed  map[string][]string        // target → the errors of its failed rounds
}

// begin prepares a contended workload's rounds.
func (m *measurer) begin(index int, w bench.Workload) *contention {
	c := &contention{index: index, w: w, sw: w, targets: m.targets(w.Kind),
		skipped: map[string]string{}, results: map[string][]*bench.Result{}, failed: map[string][]string{}}
	c.sw.Duration = m.slice(w)
	return c
}

// runRound runs one round of a contended workload: every target one
// slice, in GroupedRotation order (a server's targets side by side, as
// the uncontended workload runs them).
func (m *measurer) runRound(ctx context.Context, c *contention, round int) {
	w, sw := c.w, c.sw
	group := make([]string, len(c.targets))
	for i, t := range c.targets {
		group[i] = t.Server
	}
	for _, i := range bench.GroupedRotation(group, round) {
		t := c.targets[i]
		if why, ok := m.broken[t.Name]; ok && c.skipped[t.Name] == "" {
			c.skipped[t.Name] = "not run after an earlier failure: " + why
		}
		if _, ok := c.skipped[t.Name]; ok {
			m.show(t.Name+" · "+w.Label(), sw.Duration+runOverhead)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		m.show(fmt.Sprintf("%s · %s · round %d/%d", t.Name, w.Label(), round+1, m.rounds), sw.Duration+runOverhead)
		tw := sw
		if w.Kind == bench.OpenLoop {
			tw.Rate = w.Load * m.capacity[t.Name]
		}
		res, err := m.r.Run(ctx, t, tw, sampler(m.e, t, false))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.failed[t.Name] = append(c.failed[t.Name], fmt.Sprintf("round %d: %v", round+1, err))
			if errors.Is(err, bench.ErrStuck) {
				// Each further run would wait out the same timeouts.
				m.broken[t.Name] = w.Label() + ": " + bench.ErrStuck.Error()
				c.skipped[t.Name] = err.Error()
			}
			continue
		}
		if c.results[t.Name] == nil {
			c.results[t.Name] = make([]*bench.Result, m.rounds)
		}
		c.results[t.Name][round] = res
	}
	if paced(w) && ctx.Err() == nil {
		var ran []bench.Target
		for _, t := range c.targets {
			if _, ok := c.skipped[t.Name]; !ok {
				ran = append(ran, t)
			}
		}
		m.pacer.Measure(ctx, bench.PacedTargets(ran, m.e.targets), w.Hold, round)
	}
}

// finish makes the rows of a contended workload from the rounds it ran
// (an interrupted run ran fewer).
func (m *measurer) finish(c *contention) []*bench.Row {
	var rows []*bench.Row
	for _, t := range c.targets {
		if why, ok := c.skipped[t.Name]; ok {
			rows = append(rows, bench.SkippedRow(t, c.w, why))
			continue
		}
		row := m.aggregate(t, c.sw, c.results[t.Name], c.failed[t.Name])
		if row.Skipped == "" && c.w.Kind == bench.ManyKeys && c.w.Clients == capClients() {
			m.capacity[t.Name] = bench.Med(row.Rate)
		}
		rows = append(rows, row)
	}
	return rows
}

// probe measures the capacity of the open loop's targets that the
// many-keys workload did not (one slice each); a target without one is
// skipped.
func (m *measurer) probe(ctx context.Context, targets []bench.Target, sw bench.Workload, skipped map[string]string) {
	for _, t := range targets {
		if _, ok := skipped[t.Name]; ok || m.capacity[t.Name] > 0 {
			continue
		}
		probe := bench.Workload{Kind: bench.ManyKeys, Clients: sw.Clients, Names: sw.Names, Duration: sw.Duration}
		m.show(t.Name+" · capacity for "+sw.Label(), sw.Duration+runOverhead)
		res, err := m.r.Run(ctx, t, probe, nil)
		switch {
		case err != nil && errors.Is(err, bench.ErrStuck):
			m.broken[t.Name] = probe.Label() + ": " + bench.ErrStuck.Error()
			skipped[t.Name] = err.Error()
		case err == nil:
			m.capacity[t.Name] = bench.NewRow(res).GrantsPerSec
		}
		if m.capacity[t.Name] <= 0 {
			if _, ok := skipped[t.Name]; !ok {
				skipped[t.Name] = "no capacity measured"
			}
		}
	}
}

// aggregate makes a target's row from its rounds; a row none of whose
// rounds ran is skipped with the reasons, and a row some of whose rounds
// failed says so in its note.
func (m *measurer) aggregate(t bench.Target, w bench.Workload, rounds []*bench.Result, failed []string) *bench.Row {
	row := bench.AggregateRounds(rounds)
	if row == nil {
		why := "no round measured"
		if len(failed) > 0 {
			why = strings.Join(failed, "; ")
		}
		return bench.SkippedRow(t, w, why)
	}
	row.Params["rounds"] = len(rounds)
	if w.Kind != bench.Uncontended {
		row.Params["slice"] = w.Duration.String()
		row.Params["duration"] = (w.Duration * time.Duration(m.rounds)).String()
	}
	if len(failed) > 0 {
		row.Note = strings.TrimPrefix(row.Note+"; ", "; ") + fmt.Sprintf("%d of %d rounds failed (%s)", len(failed), len(rounds), strings.Join(failed, "; "))
	}
	return row
}

// sampler returns the server-counter reader of t's server, or nil;
// steady for a stretch in which the clients stay connected
// (Server.SampleSteady).
func sampler(e *env, t bench.Target, steady bool) func(context.Context) bench.ServerSample {
	s := e.byID[t.Server]
	if s == nil {
		return nil
	}
	return func(ctx context.Context) bench.ServerSample {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if steady {
			return s.SampleSteady(sctx)
		}
		return s.Sample(sctx)
	}
}

// progress draws a one-line progress bar on a terminal; it is silent
// when the output is not one.
type progress struct {
	w     io.Writer
	on    bool
	start time.Time
	width int
}

func (p *progress) show(i, n int, done, total time.Duration, what string) {
	if !p.on {
		return
	}
	frac := 0.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	const bar = 28
	filled := int(frac * bar)
	eta := "…"
	if el := time.Since(p.start); done > 0 {
		eta = (time.Duration(float64(el)/float64(done)*float64(total-done)) + 0).Round(time.Second).String() + " left"
	}
	line := fmt.Sprintf("[%s%s] %d/%d %s  %s", strings.Repeat("#", filled), strings.Repeat(".", bar-filled), i+1, n, eta, what)
	if len(line) > 110 {
		line = line[:110]
	}
	pad := max(p.width-len([]rune(line)), 0)
	p.width = len([]rune(line))
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
}

func (p *progress) clear() {
	if p.on && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
