package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/stats"
	"github.com/dlock-go/dlock/internal/testenv"
)

// altState is what a test target of RunAlternating shares with its test:
// how its clients were used, and a switch that makes them fail.
type altState struct {
	acquires atomic.Uint64 // acquires granted
	opened   atomic.Int32
	closed   atomic.Int32
	fail     atomic.Bool   // every Acquire fails while set
	refused  atomic.Uint64 // acquires failed
}

// altStates maps a test target's name to its state; the "test-alt"
// opener looks its target up there.
var altStates sync.Map

func init() {
	openers["test-alt"] = func(ctx context.Context, t Target) (Client, error) {
		st, ok := altStates.Load(t.Name)
		if !ok {
			return nil, fmt.Errorf("test: no state for target %q", t.Name)
		}
		s := st.(*altState)
		s.opened.Add(1)
		return &altClient{s: s}, nil
	}
	openers["test-alt-refused"] = func(ctx context.Context, t Target) (Client, error) {
		return nil, errors.New("test: connection refused")
	}
}

// altClient is an in-process lock with increasing tokens that counts its
// grants and fails on demand.
type altClient struct {
	s   *altState
	tok atomic.Uint64
}

func (c *altClient) Acquire(ctx context.Context, name string) (Held, error) {
	if c.s.fail.Load() {
		c.s.refused.Add(1)
		return nil, errors.New("test: server gone")
	}
	c.s.acquires.Add(1)
	return altHeld(c.tok.Add(1)), nil
}

func (c *altClient) FailedAttempts() uint64 { return 0 }
func (c *altClient) Close() error           { c.s.closed.Add(1); return nil }
func (c *altClient) Fencing() bool          { return true }

type altHeld uint64

func (h altHeld) Token() uint64                     { return uint64(h) }
func (h altHeld) Release(ctx context.Context) error { return nil }

// altTarget registers a fresh test target.
func altTarget(t *testing.T, name string) (Target, *altState) {
	s := &altState{}
	altStates.Store(name, s)
	t.Cleanup(func() { altStates.Delete(name) })
	return Target{Name: name, Kind: KindPeer, Impl: "test-alt", Backend: "test"}, s
}

// uncontended is the uncontended workload lasting d.
func uncontended(d time.Duration) Workload {
	return Workload{Kind: Uncontended, Clients: 1, Names: 1, Duration: d}
}

// TestAlternatingMeasuresEveryTargetInTurns: every target gets every
// round, about the same measured time, in many short alternating slices,
// with its server counters read around its own slices only.
func TestAlternatingMeasuresEveryTargetInTurns(t *testing.T) {
	sampleEverySlice(t)
	memB := MemoryTarget()
	memB.Name, memB.URL = "memory-b", "mem://dlockbench-alt-b"
	ta, sa := altTarget(t, "alt-a")
	tb, sb := altTarget(t, "alt-b")
	targets := []Target{MemoryTarget(), ta, memB, tb}
	states := map[string]*altState{"alt-a": sa, "alt-b": sb}

	// The counters of a test target are its grants: a round's Server
	// delta must equal its timed grants, no more (the untimed warm-up
	// operation of each slice, the other targets' operations) and no less.
	var mu sync.Mutex
	var log []string // the target of each sample, in order
	sample := func(tg Target) func(context.Context) ServerSample {
		s := states[tg.Name]
		if s == nil {
			return nil
		}
		return func(context.Context) ServerSample {
			mu.Lock()
			log = append(log, tg.Name)
			mu.Unlock()
			return ServerSample{Commands: s.acquires.Load(), HasCommands: true}
		}
	}
	const rounds = 8
	w := uncontended(400 * time.Millisecond)
	res, reasons, err := RunAlternating(ctxT(t, time.Minute), targets, w, rounds, sample)
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) != 0 {
		t.Fatalf("reasons = %v, want none", reasons)
	}
	for _, tg := range targets {
		rs := res[tg.Name]
		if len(rs) != rounds {
			t.Fatalf("%s: %d results, want %d", tg.Name, len(rs), rounds)
		}
		var elapsed time.Duration
		for r, x := range rs {
			if x == nil {
				t.Fatalf("%s: round %d missing", tg.Name, r)
			}
			g := x.Grants[0]
			if g == 0 || x.Acquire.TotalCount() != int64(g) || x.Release.TotalCount() != int64(g) {
				t.Fatalf("%s round %d: %d grants, %d acquires and %d releases timed", tg.Name, r, g,
					x.Acquire.TotalCount(), x.Release.TotalCount())
			}
			if x.Errors != 0 || x.Exclusion != 0 || x.Fencing != 0 || x.Procs != 1 || x.Target.Name != tg.Name || x.Workload != w {
				t.Fatalf("%s round %d: errors %d (%s), violations %d/%d, procs %d, target %q, workload %+v",
					tg.Name, r, x.Errors, x.LastErr, x.Exclusion, x.Fencing, x.Procs, x.Target.Name, x.Workload)
			}
			if x.Handoff.TotalCount() != 0 {
				t.Fatalf("%s round %d: %d handoffs with one client", tg.Name, r, x.Handoff.TotalCount())
			}
			if states[tg.Name] != nil {
				if !x.Server.HasCommands || x.Server.Commands != g {
					t.Errorf("%s round %d: server delta %+v for %d timed grants; want exactly them", tg.Name, r, x.Server, g)
				}
			} else if x.Server.HasCommands || x.Server.HasCPU {
				t.Errorf("%s round %d: server delta %+v without a sampler", tg.Name, r, x.Server)
			}
			elapsed += x.Elapsed
		}
		// A target runs until its share of each turn is reached, so it
		// never gets less than w.Duration; it overshoots by at most an
		// operation per round, and whatever the scheduler stalls it in
		// that operation (tens of ms on a busy machine under -race).
		if elapsed < w.Duration || elapsed > w.Duration*2 {
			t.Errorf("%s: measured %v in all, want %v (at most twice that)", tg.Name, elapsed, w.Duration)
		}
		t.Logf("%s: %v measured, %d grants in round 0", tg.Name, elapsed, rs[0].Grants[0])
	}
	// Slices are short: 50 ms a round per target makes 25 turns, so the
	// two sampled targets must have switched places many times.
	switches := 0
	for i := 2; i < len(log); i += 2 {
		if log[i] != log[i-2] {
			switches++
		}
	}
	if want := rounds * 25 / 2; switches < want {
		t.Errorf("the sampled targets took turns %d times in %d rounds, want at least %d", switches, rounds, want)
	}
}

// TestAlternatingFindsABrokenLock: with one client a broken lock cannot
// overlap itself, but its repeated tokens are fencing violations.
func TestAlternatingFindsABrokenLock(t *testing.T) {
	res, _, err := RunAlternating(ctxT(t, time.Minute), []Target{unsafeTarget, MemoryTarget()}, uncontended(100*time.Millisecond), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	for r, x := range res[unsafeTarget.Name] {
		if x == nil || x.Fencing == 0 {
			t.Fatalf("broken lock, round %d: %+v; want fencing violations", r, x)
		}
	}
	for r, x := range res["memory"] {
		if x == nil || x.Fencing != 0 || x.Exclusion != 0 {
			t.Fatalf("memory, round %d: %+v; want a clean round", r, x)
		}
	}
}

// TestAlternatingReportsFailuresAndMeasuresTheOthers: a target that cannot
// connect, one stuck in its warm-up, one whose server dies half-way and
// one that never grants are each reported; the others are measured in
// every round.
func TestAlternatingReportsFailuresAndMeasuresTheOthers(t *testing.T) {
	sampleEverySlice(t)
	oldConnect, oldGrace := connectTimeout, stopGrace
	connectTimeout, stopGrace = 500*time.Millisecond, 200*time.Millisecond
	defer func() { connectTimeout, stopGrace = oldConnect, oldGrace }()

	refused := Target{Name: "refused", Kind: KindPeer, Impl: "test-alt-refused", Backend: "test"}
	stuck := Target{Name: "stuck", Kind: KindPeer, Impl: "test-stuck", Backend: "test"}
	dies, sd := altTarget(t, "dies")
	never, sn := altTarget(t, "never")
	const rounds = 6
	w := uncontended(300 * time.Millisecond) // 25 slices of 2 ms a round per target
	// The switches are thrown from the samplers, which run at the start
	// and the end of each of the target's slices.
	var diesSamples, neverSamples atomic.Int32
	sample := func(tg Target) func(context.Context) ServerSample {
		switch tg.Name {
		case "dies":
			return func(context.Context) ServerSample {
				if diesSamples.Add(1) == 2*25*2+10 { // in round 2
					sd.fail.Store(true)
				}
				return ServerSample{}
			}
		case "never":
			return func(context.Context) ServerSample { neverSamples.Add(1); sn.fail.Store(true); return ServerSample{} }
		}
		return nil
	}
	targets := []Target{refused, MemoryTarget(), stuck, dies, never}
	start := time.Now()
	res, reasons, err := RunAlternating(ctxT(t, time.Minute), targets, w, rounds, sample)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("took %v; reasons %q", time.Since(start).Round(time.Millisecond), reasons)
	for name, want := range map[string]string{
		"refused": "connection refused",
		"stuck":   ErrStuck.Error(),
		"never":   "no grant in any round: test: server gone",
	} {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("reason for %s = %q, want it to say %q", name, reasons[name], want)
		}
		if _, ok := res[name]; ok {
			t.Errorf("%s has results although it was never measured", name)
		}
	}
	if len(reasons) != 3 {
		t.Errorf("reasons = %q, want three", reasons)
	}
	for r, x := range res["memory"] {
		if x == nil || x.Grants[0] == 0 {
			t.Fatalf("memory round %d: %+v, want it measured", r, x)
		}
	}
	// "dies" is measured until its server goes (in round 2, or later when
	// the machine is so busy that slices overrun and turns are skipped),
	// then has no rounds; a round in which it went counts the errors.
	d := res["dies"]
	k := 0
	for k < len(d) && d[k] != nil {
		k++
	}
	if len(d) != rounds || k < 2 || k == rounds {
		t.Fatalf("dies: rounds %v; want some rounds measured, then none", d)
	}
	for r := k + 1; r < rounds; r++ {
		if d[r] != nil {
			t.Errorf("dies: round %d measured after its server had gone: %+v", r, d[r])
		}
	}
	if x := d[k-1]; x.Errors > 0 && !strings.Contains(x.LastErr, "server gone") {
		t.Errorf("dies: round %d counts %d errors, the last %q", k-1, x.Errors, x.LastErr)
	}
	// "never" failed failStreak slices in a row (the first in its timed
	// operation, after one sample each side; the next in their untimed
	// warm-up operation, before any sample) and sat out the round; after
	// giveUpRounds such rounds it was not run again.
	if got, want := neverSamples.Load(), int32(2); got != want {
		t.Errorf("never: sampled %d times; want %d", got, want)
	}
	if got, want := sn.refused.Load(), uint64(failStreak*giveUpRounds); got != want {
		t.Errorf("never: %d acquires failed; want %d (%d a round, then given up after %d rounds)", got, want, failStreak, giveUpRounds)
	}
	for _, s := range []*altState{sd, sn} {
		if s.opened.Load() != 1 || s.closed.Load() != 1 {
			t.Errorf("clients opened %d, closed %d; want 1 and 1", s.opened.Load(), s.closed.Load())
		}
	}
}

// TestAlternatingStopsWhenCancelled: the end of ctx ends a long run at
// once, with every client closed.
func TestAlternatingStopsWhenCancelled(t *testing.T) {
	ta, sa := altTarget(t, "alt-a")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := RunAlternating(ctx, []Target{MemoryTarget(), ta}, uncontended(time.Hour), 15, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("returned %v after the start, want promptly after 300 ms", took)
	}
	if sa.opened.Load() != 1 || sa.closed.Load() != 1 {
		t.Errorf("clients opened %d, closed %d; want 1 and 1", sa.opened.Load(), sa.closed.Load())
	}
}

func TestAlternatingRejectsWhatItCannotRun(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	mem := MemoryTarget()
	for _, c := range []struct {
		targets []Target
		w       Workload
		rounds  int
		want    string
	}{
		{[]Target{mem}, Workload{Kind: Handoff, Clients: 8, Names: 1, Duration: time.Second}, 3, "one client on one name"},
		{[]Target{mem}, uncontended(time.Second), 0, "at least one round"},
		{[]Target{mem, mem}, uncontended(time.Second), 3, `two targets named "memory"`},
	} {
		if _, _, err := RunAlternating(ctx, c.targets, c.w, c.rounds, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunAlternating(%d targets, %s, %d rounds) = %v, want an error saying %q", len(c.targets), c.w.Label(), c.rounds, err, c.want)
		}
	}
}

// TestAlternatingOnRedis runs dlock's Redis driver, its floor and the
// raw round trip alternating on a real server, twice, and the same pair
// one after the other, twice, and logs both ways' ×floor: the median of
// the per-round ratios of acquire p50 + release p50 (the A/B check of
// issue 14; figures, not a timed assertion). It checks that the server's
// commands are charged to the target whose slice ran them.
func TestAlternatingOnRedis(t *testing.T) {
	s, _, targets := redisTargets(t, "redis", "floor redis", "rtt redis")
	if len(targets) != 3 {
		t.Fatalf("targets = %v, want redis, its floor and its round trip", targets)
	}
	sample := func(Target) func(context.Context) ServerSample { return s.Sample }
	ctx := ctxT(t, 5*time.Minute)
	w := uncontended(time.Second)
	const rounds = 10
	use := func(x *Result) float64 {
		return float64(x.Acquire.ValueAtQuantile(50) + x.Release.ValueAtQuantile(50))
	}
	for run := range 2 {
		res, reasons, err := RunAlternating(ctx, targets, w, rounds, sample)
		if err != nil {
			t.Fatal(err)
		}
		if len(reasons) != 0 {
			t.Fatalf("reasons = %v", reasons)
		}
		var ratios []float64
		for r := range rounds {
			for _, tg := range targets {
				x := res[tg.Name][r]
				if x == nil || x.Grants[0] == 0 || x.Errors != 0 || x.Exclusion != 0 || x.Fencing != 0 || !x.Server.HasCommands {
					t.Fatalf("%s round %d: %+v", tg.Name, r, x)
				}
			}
			ratios = append(ratios, use(res["redis"][r])/use(res["floor redis"][r]))
		}
		cmds := func(name string) float64 {
			var c, g uint64
			for _, x := range res[name] {
				c += x.Server.Commands
				g += x.Server.Grants // the grants the readings surround
			}
			return float64(c) / float64(g)
		}
		// The round trip is one command per grant: anything more would be
		// another target's work (or a warm-up) charged to it.
		if c := cmds("rtt redis"); c != 1 {
			t.Errorf("rtt redis: %.4f server commands per grant, want 1", c)
		}
		if c := cmds("redis"); c < 2 {
			t.Errorf("redis: %.4f server commands per grant, want at least 2 (acquire and release)", c)
		}
		iv := stats.MedianCI(ratios, Confidence)
		t.Logf("alternating run %d: redis ×floor %.3f [%.3f, %.3f] over %d rounds; cmds/grant redis %.2f, floor %.2f, rtt %.2f",
			run+1, iv.Median, iv.Lo, iv.Hi, iv.Rounds, cmds("redis"), cmds("floor redis"), cmds("rtt redis"))
	}
	if testing.Short() {
		return
	}
	r := &Runner{}
	for run := range 2 {
		var u [2]float64
		for i, tg := range targets[:2] {
			res, err := r.Run(ctx, tg, w, nil)
			if err != nil {
				t.Fatal(err)
			}
			u[i] = use(res)
		}
		t.Logf("sequential run %d: redis ×floor %.3f (%s then %s, %v each)", run+1, u[0]/u[1], targets[0].Name, targets[1].Name, w.Duration)
	}
}

// sampleEverySlice makes RunAlternating read the server counters around
// every slice, for tests that count the readings to follow the turns.
func sampleEverySlice(t *testing.T) {
	sampleEvery = 1
	t.Cleanup(func() { sampleEvery = 4 })
}

// redisTargets starts a Redis server and returns it (closed when the test
// ends), every target TargetsFor lists for it, and those of them named
// names, in that order.
func redisTargets(t *testing.T, names ...string) (s *Server, all, named []Target) {
	t.Helper()
	srv := testenv.Redis(t)
	s = &Server{ID: "redis", Backend: "redis", URL: srv.URL}
	t.Cleanup(func() { s.Close() })
	all, _ = TargetsFor(s)
	for _, tg := range all {
		if slices.Contains(names, tg.Name) {
			named = append(named, tg)
		}
	}
	return s, all, named
}
