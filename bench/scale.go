package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/stats"
	"github.com/dlock-go/dlock/internal/testenv"
)

// The "scale" workloads: whether what one Locker costs stays flat as its
// work grows. Each is a curve over three points, measured on every dlock
// target (its Only permitting), one Locker per target:
//
//   - names: 32 goroutines sharing one Locker cycle over 10, 1 000 and
//     10 000 names, beside the strategy's floor at the same concurrency
//     (32 floor clients, a connection each) on the same names; the ratio
//     is dlock's grants/s over the floor's, paired per round (target
//     ≥ 0.8 at 10 000);
//   - leases: 10, 100 and 1 000 leases held at once by one Locker, kept
//     alive by its keep-alive: the process CPU time (getrusage) the held
//     leases add over the same Locker idle, as a share of one core
//     (target ≤ 1 %);
//   - waiters: 1, 8 and 64 goroutines of one Locker on one name, hold
//     1 ms: grants/s and, where the server counts them, its commands per
//     grant (target ≤ 3 on Redis at 64).

// Scale is the workload kind of the scale curves.
const Scale = "scale"

// Axes of the scale workload (Workload.Axis).
const (
	ScaleNames   = "names"
	ScaleLeases  = "leases"
	ScaleWaiters = "waiters"
)

// ScaleClients is the concurrency of the names curve.
const ScaleClients = 32

// scaleRounds is the rounds of the names curve: in each, dlock and the
// floor run one slice each, in an order that alternates every round. The
// point's time is split into slices rather than a few long runs: the load
// of a shared machine drifts over seconds, and a pair of adjacent slices
// sees the same load, so the paired ratios vary less; and 10 rounds give
// the median a 95 % interval from the 2nd to the 9th ratio, where 3
// rounds gave their minimum and maximum (75 %), too wide to tell 0.8
// from 1.0. A slice is ScaleNamesTime/20: 100 ms (30 ms with -quick).
const scaleRounds = 10

// ScaleNamesTime is the time of one point of the names curve, split
// between dlock and its floor in 2·scaleRounds slices; the other curves'
// points take the scale workload's own time. Slices of 22.5 ms (a 450 ms
// point) measured every SQL strategy 5-10 % lower against its floor than
// slices of 90 or 180 ms did, and with intervals of ±20-30 % where the
// longer slices' were ±3-10 % (the same binary, PostgreSQL and MySQL,
// 10 000 names, one run after the other): each slice begins with the
// other side's rows, code and connections in the CPU caches and the
// server's buffers, a cost the shorter the slice the larger its share, and
// one a steady load does not pay.
const (
	ScaleNamesTime      = 2 * time.Second
	ScaleNamesTimeQuick = 600 * time.Millisecond
)

// ScaleLeaseTTL is the TTL of the leases curve's leases. The default TTL
// (30 s) refreshes every 10 s, so a window of a few seconds would see no
// refresh at all, or a burst of all of them; at 3 s every lease is
// refreshed every second, each about twice in the measured window. The
// cost of keeping leases alive goes with the refreshes per second, so at
// the default TTL it is about a tenth (ScaleRow.CorePctDefaultTTL).
const ScaleLeaseTTL = 3 * time.Second

// scalePoints are the points of each curve.
var scalePoints = map[string][]int{
	ScaleNames:   {10, 1000, 10000},
	ScaleLeases:  {10, 100, 1000},
	ScaleWaiters: {1, 8, 64},
}

// scaleWorkloads returns the scale workloads: every point of every
// curve, names being a names point's time (split between dlock and its
// floor) and d the other points' measured time (the leases curve
// measures its window and the idle one of that length).
func scaleWorkloads(d, names time.Duration) []Workload {
	var ws []Workload
	for _, n := range scalePoints[ScaleNames] {
		ws = append(ws, Workload{Kind: Scale, Axis: ScaleNames, Clients: ScaleClients, Names: n, Duration: names})
	}
	for _, n := range scalePoints[ScaleLeases] {
		ws = append(ws, Workload{Kind: Scale, Axis: ScaleLeases, Clients: 1, Names: n, Duration: d})
	}
	for _, n := range scalePoints[ScaleWaiters] {
		ws = append(ws, Workload{Kind: Scale, Axis: ScaleWaiters, Clients: n, Names: 1, Hold: time.Millisecond, Duration: d})
	}
	return ws
}

// ScalePoint is the x of a scale row on its curve: names, leases or
// waiters.
func (r *Row) ScalePoint() int {
	if r.Workload != Scale {
		return 0
	}
	switch r.Params["axis"] {
	case ScaleWaiters:
		return int(toFloat(r.Params["clients"]))
	}
	return int(toFloat(r.Params["names"]))
}

// RunScale measures one point of a scale curve on a dlock target. floor
// is the target's floor (names only; nil leaves the ratio out). sample
// reads the target's server counters (nil: none). The row is skipped,
// with the reason, when nothing could be measured; errors that left some
// measurement are counted in it. A point that does not end within
// scaleLimit(w) (a driver ignoring its context) is abandoned, its
// goroutines and connections left behind, and RunScale returns a skipped
// row and an error wrapping ErrStuck: the target should not be run again.
func RunScale(ctx context.Context, t Target, floor *Target, w Workload, sample func(context.Context) ServerSample) (*Row, error) {
	type result struct {
		row *Row
		err error
	}
	done := make(chan result, 1)
	pctx, cancel := context.WithCancel(ctx)
	go func() {
		var r result
		switch w.Axis {
		case ScaleNames:
			r.row, r.err = scaleNames(pctx, t, floor, w)
		case ScaleLeases:
			r.row, r.err = scaleLeases(pctx, t, w)
		case ScaleWaiters:
			r.row, r.err = scaleWaiters(pctx, t, w, sample)
		default:
			r.err = fmt.Errorf("bench: unknown scale axis %q", w.Axis)
		}
		done <- r
	}()
	limit := scaleLimit(w)
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case r := <-done:
		cancel()
		if r.err != nil {
			return SkippedRow(t, w, r.err.Error()), nil
		}
		return r.row, nil
	case <-timer.C:
		cancel()
		err := fmt.Errorf("%w: the point did not end within %v", ErrStuck, limit)
		return SkippedRow(t, w, err.Error()), err
	}
}

// scaleLimit is how long a scale point may take: its warm-ups and its
// measured time, and scaleSlack for connecting, taking 1 000 leases and
// stopping.
func scaleLimit(w Workload) time.Duration {
	return 2*scaleWarmLimit + 3*w.Duration + ScaleLeaseTTL + scaleSlack
}

// scaleAcquireLimit bounds each Acquire of the leases curve, on a free
// name. A variable for tests.
var scaleAcquireLimit = 2 * time.Second

// scaleSlack is a variable for tests.
var scaleSlack = 5 * time.Second

// scaleRow is the row of a scale point with its target's identity. Its
// note is the point's own (the target's is in its other rows), so that
// the curves' notes say what happened at each point.
func scaleRow(t Target, w Workload) *Row {
	return &Row{Backend: t.Name, Family: t.Backend, Server: t.Server, Kind: t.Kind, URL: t.RedactedURL(),
		Workload: w.Kind, Label: w.Label(), Params: w.Params(), Procs: 1,
		ServerCmdsPerGrant: -1, ServerCPUPerGrantNs: -1, ServerReqsPerGrant: -1}
}

// scalePrefix makes the names of one scale point unique to the run.
func scalePrefix(w Workload) string {
	return fmt.Sprintf("dlockbench-%04x-scale-%s%d-", rand.Uint32()&0xffff, w.Axis, w.Clients*100000+w.Names)
}

// loopStats is what a closed loop of clients did.
type loopStats struct {
	grants, errors atomic.Uint64
	mu             sync.Mutex
	lastErr        string
}

func (s *loopStats) fail(err error) {
	s.errors.Add(1)
	s.mu.Lock()
	s.lastErr = err.Error()
	s.mu.Unlock()
}

// closedLoop runs n goroutines for d, goroutine g acquiring and releasing
// with client(g) the names pick(g, k) gives for its k-th operation and
// holding each grant for hold. Each grant goes through chk (nil: none)
// at the name's index. It returns when every goroutine has stopped: a
// goroutine starts no operation after d, and the one it is in finishes
// (each bounded by opTimeout): cancelling it would break connections
// that do not survive a cancelled query (a floor's MySQL connection).
func closedLoop(ctx context.Context, n int, d, hold time.Duration, client func(g int) Client,
	names []string, pick func(g, k int) int, chk *Checker, fenced bool, st *loopStats) time.Duration {
	start := time.Now()
	stop := start.Add(d)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			c := client(g)
			for k := 0; ctx.Err() == nil && time.Now().Before(stop); k++ {
				i := pick(g, k)
				actx, cancel := context.WithTimeout(ctx, opTimeout)
				s0 := Now()
				h, err := c.Acquire(actx, names[i])
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						st.fail(err)
						sleepCtx(ctx, time.Millisecond)
					}
					continue
				}
				if chk != nil {
					chk.Enter(i, h.Token(), fenced, s0, Now())
				}
				if hold > 0 {
					testenv.Hold(hold)
				}
				if chk != nil {
					chk.Exit(i)
				}
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				if err := h.Release(rctx); err != nil {
					st.fail(fmt.Errorf("release: %w", err))
				}
				rcancel()
				st.grants.Add(1)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// cycle gives each of n goroutines its own names when there are at least
// as many names as goroutines (goroutine g: names g, g+n, g+2n…), and
// shares them round-robin when there are fewer.
func cycle(n, names int) func(g, k int) int {
	if names < n {
		return func(g, _ int) int { return g % names }
	}
	per := names / n
	return func(g, k int) int { return g + n*(k%per) }
}

// warmScale takes and frees every name once, spread over the clients, for
// at most limit: the curve measures names in use, not their first use
// (the "uncontended fresh" rows measure that). Names left cold when the
// limit ends are used cold, and the note says how many.
func warmScale(ctx context.Context, n int, client func(g int) Client, names []string, limit time.Duration) int {
	stop := time.Now().Add(limit)
	var warmed atomic.Int64
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			c := client(g)
			for j := g; j < len(names) && ctx.Err() == nil && time.Now().Before(stop); j += n {
				actx, cancel := context.WithTimeout(ctx, opTimeout)
				h, err := c.Acquire(actx, names[j])
				if err == nil {
					err = h.Release(actx)
				}
				cancel()
				if err != nil {
					return
				}
				warmed.Add(1)
			}
		})
	}
	wg.Wait()
	return len(names) - int(warmed.Load())
}

// scaleWarmLimit bounds the warm-up of one side of a names point: 10 000
// names take about a second on Redis, more on a SQL strategy, where the
// names left cold are used cold, on both sides.
const scaleWarmLimit = 500 * time.Millisecond

// scaleNames measures the names curve's point w: one Locker shared by
// w.Clients goroutines, and the floor with one client per goroutine,
// alternating in scaleRounds rounds of w.Duration/(2·scaleRounds) each.
func scaleNames(ctx context.Context, t Target, floor *Target, w Workload) (*Row, error) {
	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	dc, err := Open(octx, t)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer dc.Close()
	var fcs []Client
	defer func() {
		for _, c := range fcs {
			c.Close()
		}
	}()
	if floor != nil {
		for range w.Clients {
			c, err := Open(octx, *floor)
			if err != nil {
				return nil, fmt.Errorf("open %s: %w", floor.Name, err)
			}
			fcs = append(fcs, c)
		}
	}
	prefix := scalePrefix(w)
	names := make([]string, w.Names)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i)
	}
	// The floor takes the same names: its keys and rows are its own (a
	// floor's key or table is not dlock's), so neither finds the other's.
	dlockOf := func(int) Client { return dc }
	floorOf := func(g int) Client { return fcs[g] }
	pick := cycle(w.Clients, w.Names)
	cold := warmScale(ctx, w.Clients, dlockOf, names, scaleWarmLimit)
	floorCold := 0
	if floor != nil {
		floorCold = warmScale(ctx, w.Clients, floorOf, names, scaleWarmLimit)
	}
	row := scaleRow(t, w)
	chk := NewChecker(w.Names)
	slice := w.Duration / time.Duration(2*scaleRounds)
	var rates, floorRates, ratios []float64
	var st, fst loopStats
	for r := range scaleRounds {
		var dr, fr float64
		runDlock := func() {
			g0 := st.grants.Load()
			el := closedLoop(ctx, w.Clients, slice, 0, dlockOf, names, pick, chk, fencing(dc), &st)
			dr = float64(st.grants.Load()-g0) / el.Seconds()
		}
		runFloor := func() {
			g0 := fst.grants.Load()
			el := closedLoop(ctx, w.Clients, slice, 0, floorOf, names, pick, nil, false, &fst)
			fr = float64(fst.grants.Load()-g0) / el.Seconds()
		}
		if floor == nil {
			runDlock()
		} else if r%2 == 0 {
			runDlock()
			runFloor()
		} else {
			runFloor()
			runDlock()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		rates = append(rates, dr)
		if floor != nil {
			floorRates = append(floorRates, fr)
			if fr > 0 {
				ratios = append(ratios, dr/fr)
			}
		}
		row.Rounds = append(row.Rounds, RoundFigures{Round: r, GrantsPerSec: dr})
	}
	row.Grants = st.grants.Load()
	if row.Grants == 0 {
		return nil, fmt.Errorf("no grant: %s", st.lastErr)
	}
	row.Rate = stats.MedianCI(rates, Confidence)
	row.GrantsPerSec = row.Rate.Median
	row.Errors, row.LastError = st.errors.Load(), st.lastErr
	row.Violations, row.FencingViolations = chk.Violations()
	row.FailedPerGrant = float64(dc.FailedAttempts()) / float64(row.Grants)
	if floor != nil {
		row.Floor = floor.Name
		row.FloorRate = stats.MedianCI(floorRates, Confidence)
		row.RateToFloor = stats.MedianCI(ratios, Confidence)
		if fst.errors.Load() > 0 {
			row.Note = joinNote(row.Note, fmt.Sprintf("the floor had %d errors (%s)", fst.errors.Load(), fst.lastErr))
		}
	}
	row.Params["rounds"] = scaleRounds
	row.Params["slice"] = slice.String()
	if cold > 0 || floorCold > 0 {
		row.Note = joinNote(row.Note, fmt.Sprintf("%d names (dlock) and %d (floor) were not warmed within %v and were first used measured", cold, floorCold, scaleWarmLimit))
	}
	return row, nil
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scaleSettle is how long the held leases run before the measured window:
// the acquisitions' own aftermath (goroutines winding down, the first
// timers) stays out of it.
const scaleSettle = 200 * time.Millisecond

// scaleIdle is the idle window of the leases curve (its CPU rate is
// subtracted; the held window lasts one refresh period, ScaleLeaseTTL/3,
// so that every lease is refreshed once in it whatever its phase).
const scaleIdle = 500 * time.Millisecond

// scaleLeases measures the leases curve's point w: the process CPU time
// over one refresh period with w.Names leases held by one Locker, minus
// that of scaleIdle with the Locker open and idle (each as a rate), as a
// share of one core. Nothing else of the benchmark runs meanwhile (the scale curves
// run one at a time, after every other workload), so the process's CPU
// time is the Locker's and the runtime's, and the idle window takes the
// runtime's away.
func scaleLeases(ctx context.Context, t Target, w Workload) (*Row, error) {
	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	l, err := dlock.Open(octx, t.URL)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer l.Close()
	ttl := max(ScaleLeaseTTL, l.Capabilities().MinTTL)
	if mx := l.Capabilities().MaxTTL; mx > 0 {
		ttl = min(ttl, mx)
	}
	opts := &dlock.AcquireOptions{TTL: ttl}
	prefix := scalePrefix(w)
	// One lease taken and freed: the connection and scripts are warm.
	if ls, err := l.Acquire(octx, prefix+"warm", opts); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	} else if err := ls.Release(octx); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	if !sleepCtx(ctx, scaleSettle) {
		return nil, ctx.Err()
	}
	c0 := cpuTime()
	t0 := time.Now()
	if !sleepCtx(ctx, scaleIdle) {
		return nil, ctx.Err()
	}
	idle := cpuTime() - c0
	idleWall := time.Since(t0)

	// The leases, taken by 8 goroutines at once (1 000 one after another
	// on a SQL strategy would take seconds). Each name is free, so an
	// Acquire that takes scaleAcquireLimit waits for something else: a
	// strategy that pins a connection per lease has run out of its pool.
	// Taking stops there, and the point measures the leases it holds
	// (its note says how many of how many, and why).
	leases := make([]*dlock.Lease, w.Names)
	var st loopStats
	var next atomic.Int64
	var full atomic.Bool
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= w.Names || octx.Err() != nil || full.Load() {
					return
				}
				actx, cancel := context.WithTimeout(octx, scaleAcquireLimit)
				ls, err := l.Acquire(actx, prefix+strconv.Itoa(i), opts)
				cancel()
				if err != nil {
					st.fail(err)
					if actx.Err() != nil {
						full.Store(true)
					}
					continue
				}
				leases[i] = ls
			}
		})
	}
	wg.Wait()
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := g; i < len(leases); i += 8 {
					if leases[i] != nil {
						_ = leases[i].Release(rctx)
					}
				}
			})
		}
		wg.Wait()
	}()
	held := 0
	for _, ls := range leases {
		if ls != nil {
			held++
		}
	}
	if held == 0 {
		return nil, fmt.Errorf("no lease taken of %d: %s", w.Names, st.lastErr)
	}
	if !sleepCtx(ctx, scaleSettle) {
		return nil, ctx.Err()
	}
	c1 := cpuTime()
	t1 := time.Now()
	window := ttl / 3
	if !sleepCtx(ctx, window) {
		return nil, ctx.Err()
	}
	busy := cpuTime() - c1
	busyWall := time.Since(t1)
	lost := 0
	for _, ls := range leases {
		if ls != nil && ls.Err() != nil {
			lost++
		}
	}
	row := scaleRow(t, w)
	row.Grants = uint64(held)
	pct := 100 * (busy.Seconds()/busyWall.Seconds() - idle.Seconds()/idleWall.Seconds())
	row.CorePct = &pct
	dflt := pct * ttl.Seconds() / dlock.DefaultTTL.Seconds()
	row.CorePctDefaultTTL = &dflt
	row.Params["lease_ttl"] = ttl.String()
	row.Params["refresh_every"] = (ttl / 3).String()
	row.Params["window"] = window.String()
	row.Params["duration"] = window.String()
	row.Errors, row.LastError = st.errors.Load(), st.lastErr
	switch {
	case held < w.Names && full.Load():
		row.Note = joinNote(row.Note, fmt.Sprintf("held %d of %d leases: an Acquire of a free name waited %v (a strategy that pins a connection per lease has no more in its pool): %s",
			held, w.Names, scaleAcquireLimit, st.lastErr))
	case held < w.Names:
		row.Note = joinNote(row.Note, fmt.Sprintf("held %d of %d leases (%s)", held, w.Names, st.lastErr))
	}
	if lost > 0 {
		row.Errors += uint64(lost)
		row.LastError = fmt.Sprintf("%d leases lost while held", lost)
		row.Note = joinNote(row.Note, row.LastError)
	}
	return row, nil
}

// scaleWaiters measures the waiters curve's point w: w.Clients goroutines
// of one Locker on one name, each holding it w.Hold, for w.Duration; the
// server's counters are read around it.
func scaleWaiters(ctx context.Context, t Target, w Workload, sample func(context.Context) ServerSample) (*Row, error) {
	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c, err := Open(octx, t)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer c.Close()
	names := []string{scalePrefix(w) + "0"}
	if err := warmUp(octx, c, names[0], 0); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	var before ServerSample
	if sample != nil {
		before = sample(ctx)
	}
	chk := NewChecker(1)
	var st loopStats
	failed0 := c.FailedAttempts()
	el := closedLoop(ctx, w.Clients, w.Duration, w.Hold, func(int) Client { return c }, names,
		func(int, int) int { return 0 }, chk, fencing(c), &st)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	row := scaleRow(t, w)
	row.Grants = st.grants.Load()
	if row.Grants == 0 {
		return nil, fmt.Errorf("no grant: %s", st.lastErr)
	}
	if sample != nil {
		d := sample(ctx).Sub(before)
		if d.HasCommands {
			row.ServerCmdsPerGrant = float64(d.Commands) / float64(row.Grants)
			if t.Kind == KindDlock && t.Backend == "redis" {
				row.ServerReqsPerGrant = float64(d.Requests) / float64(row.Grants)
			}
		}
		if d.HasCPU {
			row.ServerCPUPerGrantNs = float64(d.CPU) / float64(row.Grants)
		}
	}
	row.GrantsPerSec = float64(row.Grants) / el.Seconds()
	row.Rate = stats.MedianCI([]float64{row.GrantsPerSec}, Confidence)
	row.Errors, row.LastError = st.errors.Load(), st.lastErr
	row.Violations, row.FencingViolations = chk.Violations()
	row.FailedPerGrant = float64(c.FailedAttempts()-failed0) / float64(row.Grants)
	return row, nil
}
