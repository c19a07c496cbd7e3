package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/dlock-go/dlock/internal/floor"
	"github.com/dlock-go/dlock/internal/stats"
	"github.com/dlock-go/dlock/internal/testenv"
)

// The "semaphore" workload: a counting semaphore of SemPermits permits
// contended by SemClients clients (each its own Locker, as separate
// processes would be), each holding a permit for the hold, taking it again
// at once. It runs on every dlock target whose backend has semaphores
// (Capabilities.MaxPermits > 0), each beside its backend's semaphore
// floor (internal/floor's for Redis, ZooKeeper, PostgreSQL and MySQL, etcd's in
// etcd_sem.go), the two alternating slice by slice over the rounds, as the
// scale curves' names do. The figures: grants/s, its ratio to the ideal
// (N/hold: every permit always held, handed over in no time) and to the
// floor's (paired per round), and the acquire latency (from asking to
// holding). A checker counts more than N holders at once and tokens not
// above one released before their acquire began.

// Semaphore is the workload kind of the counting semaphore.
const Semaphore = "semaphore"

// The semaphore workload's shape: more clients than permits.
const (
	SemPermits = 4
	SemClients = 16
)

// semaphoreWorkload is the workload: d is one target's measured time,
// split between dlock and its floor over the rounds.
func semaphoreWorkload(d time.Duration) Workload {
	return Workload{Kind: Semaphore, Clients: SemClients, Names: 1, Permits: SemPermits, Hold: time.Millisecond, Duration: d}
}

// errNoSemaphores is RunSemaphore's error for a backend without
// semaphores: the target has no row.
var errNoSemaphores = errors.New("no semaphores")

// semOpener opens one client of a backend's semaphore floor on the server
// URL with the workload's permits.
type semOpener func(ctx context.Context, serverURL string, permits int) (Client, error)

// semFloors are the semaphore floors by family.
var semFloors = map[string]semOpener{
	"redis":     internalSemFloor,
	"zookeeper": internalSemFloor,
	"postgres":  internalSemFloor,
	"mysql":     internalSemFloor,
	"etcd":      openEtcdSemFloor,
}

// SemaphoreFloorNote says what a family's semaphore floor sends and
// guarantees; "" when it has none.
func SemaphoreFloorNote(family string) string {
	if family == "etcd" {
		return etcdSemFloorNote
	}
	return floor.AboutSemaphore(family)
}

func internalSemFloor(ctx context.Context, serverURL string, permits int) (Client, error) {
	s, err := floor.OpenSemaphore(ctx, serverURL, &floor.Options{TTL: LeaseTTL})
	if err != nil {
		return nil, err
	}
	return &semFloorClient{s: s, permits: permits}, nil
}

// semFloorClient is a Client of an internal/floor semaphore.
type semFloorClient struct {
	s       *floor.Semaphore
	permits int
}

func (c *semFloorClient) Acquire(ctx context.Context, name string) (Held, error) {
	g, err := c.s.Acquire(ctx, name, c.permits)
	if err != nil {
		return nil, err
	}
	return g, nil
}
func (c *semFloorClient) FailedAttempts() uint64 { return 0 }
func (c *semFloorClient) Close() error           { return c.s.Close() }

// semDlockClient takes permits of a dlock semaphore on a Locker of its
// own.
type semDlockClient struct {
	*dlockClient
	permits int
}

func openSemDlock(ctx context.Context, t Target, permits int) (*semDlockClient, error) {
	c, err := openDlock(ctx, t)
	if err != nil {
		return nil, err
	}
	dc := c.(*dlockClient)
	return &semDlockClient{dlockClient: dc, permits: permits}, nil
}

func (c *semDlockClient) Acquire(ctx context.Context, name string) (Held, error) {
	s, err := c.l.Semaphore(name, c.permits)
	if err != nil {
		return nil, err
	}
	ls, err := s.Acquire(ctx, c.opts)
	if err != nil {
		return nil, err
	}
	return lease{ls}, nil
}

// semChecker watches the holders of one semaphore: more than permits at
// once is an exclusion violation; a token not above the largest token
// released before its acquire began is a fencing violation (that holder
// was granted before the acquire asked, so before this grant).
type semChecker struct {
	permits           int64
	holders           atomic.Int64
	released          atomic.Uint64
	exclusion, fenced atomic.Uint64
}

// before is read as an acquire begins.
func (c *semChecker) before() uint64 { return c.released.Load() }

func (c *semChecker) enter(tok, before uint64, fencing bool) {
	if c.holders.Add(1) > c.permits {
		c.exclusion.Add(1)
	}
	if fencing && tok <= before {
		c.fenced.Add(1)
	}
}

// exit is called before the holder releases.
func (c *semChecker) exit(tok uint64) {
	c.holders.Add(-1)
	for r := c.released.Load(); tok > r && !c.released.CompareAndSwap(r, tok); r = c.released.Load() {
	}
}

// semSide is what one side (dlock or its floor) measured over the rounds.
type semSide struct {
	acq, rel, hold  *hdrhistogram.Histogram
	grants          []uint64 // per client
	st              loopStats
	maxWait         int64
	rounds          []RoundFigures
	ideals, toIdeal []float64
	chk             semChecker
}

func newSemSide(w Workload) *semSide {
	return &semSide{acq: newHist(), rel: newHist(), hold: newHist(), grants: make([]uint64, w.Clients),
		chk: semChecker{permits: int64(w.Permits)}}
}

// slice runs the clients on the semaphore name for d and records round r.
func (s *semSide) slice(ctx context.Context, r int, clients []Client, name string, w Workload, d time.Duration, fencing bool) {
	type local struct {
		acq, rel, hold *hdrhistogram.Histogram
		grants         uint64
		maxWait        int64
	}
	locals := make([]*local, len(clients))
	start := time.Now()
	stop := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range clients {
		l := &local{acq: newHist(), rel: newHist(), hold: newHist()}
		locals[i] = l
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(stop) {
				actx, cancel := context.WithTimeout(ctx, opTimeout)
				floor := s.chk.before()
				a0 := Now()
				h, err := c.Acquire(actx, name)
				got := Now()
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						s.st.fail(err)
						sleepCtx(ctx, time.Millisecond)
					}
					continue
				}
				record(l.acq, got-a0)
				l.maxWait = max(l.maxWait, got-a0)
				s.chk.enter(h.Token(), floor, fencing)
				h0 := Now()
				testenv.Hold(w.Hold)
				record(l.hold, Now()-h0)
				s.chk.exit(h.Token())
				r0 := Now()
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				if err := h.Release(rctx); err != nil {
					s.st.fail(fmt.Errorf("release: %w", err))
				}
				rcancel()
				record(l.rel, Now()-r0)
				l.grants++
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	var grants uint64
	hold := newHist()
	for i, l := range locals {
		s.acq.Merge(l.acq)
		s.rel.Merge(l.rel)
		s.hold.Merge(l.hold)
		hold.Merge(l.hold)
		s.grants[i] += l.grants
		s.maxWait = max(s.maxWait, l.maxWait)
		grants += l.grants
	}
	s.st.grants.Add(grants)
	f := RoundFigures{Round: r, GrantsPerSec: float64(grants) / el.Seconds()}
	if hold.TotalCount() > 0 {
		f.HoldNs = float64(hold.ValueAtQuantile(50))
		ideal := float64(w.Permits) / (f.HoldNs / 1e9)
		s.ideals = append(s.ideals, ideal)
		s.toIdeal = append(s.toIdeal, f.GrantsPerSec/ideal)
	}
	s.rounds = append(s.rounds, f)
}

// row makes the side's row.
func (s *semSide) row(t Target, w Workload, kind, name string) *Row {
	r := scaleRow(t, w)
	r.Backend, r.Kind, r.Note = name, kind, t.Note
	r.Rounds = s.rounds
	q := func(h *hdrhistogram.Histogram, p float64) int64 {
		if h.TotalCount() == 0 {
			return 0
		}
		return h.ValueAtQuantile(p)
	}
	r.P50, r.P99, r.P999 = q(s.acq, 50), q(s.acq, 99), q(s.acq, 99.9)
	r.ReleaseP50, r.ReleaseP99, r.ReleaseP999 = q(s.rel, 50), q(s.rel, 99), q(s.rel, 99.9)
	r.HoldNs = q(s.hold, 50)
	r.Grants = s.st.grants.Load()
	rates := make([]float64, len(s.rounds))
	for i, f := range s.rounds {
		rates[i] = f.GrantsPerSec
	}
	r.Rate = stats.MedianCI(rates, Confidence)
	r.GrantsPerSec = r.Rate.Median
	if len(s.ideals) > 0 {
		r.Ideal = stats.MedianCI(s.ideals, Confidence)
		r.ToIdeal = stats.MedianCI(s.toIdeal, Confidence)
	}
	r.Jain = jain(s.grants)
	r.MaxWait = s.maxWait
	r.Violations, r.FencingViolations = s.chk.exclusion.Load(), s.chk.fenced.Load()
	r.Errors, r.LastError = s.st.errors.Load(), s.st.lastErr
	for _, p := range []float64{0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1} {
		if s.acq.TotalCount() > 0 {
			r.Latency = append(r.Latency, [2]float64{p, float64(s.acq.ValueAtQuantile(p * 100))})
		}
	}
	return r
}

// RunSemaphore measures the semaphore workload w on the dlock target t,
// beside its backend's semaphore floor, in rounds: in each, dlock and the
// floor run a slice of w.Duration/(2·rounds) each, in an order that flips
// every round. It returns t's row and the floor's (none without a floor),
// or an error wrapping errNoSemaphores when t's backend has no
// semaphores. A target that could not be measured gets a skipped row. A
// run that does not end within its limit (a driver ignoring its context)
// is abandoned, its goroutines and connections left behind: RunSemaphore
// returns a skipped row and an error wrapping ErrStuck. With quiet, the
// servers but t's settle before each slice (Quiet.Settle); each row's
// Settle sums its slices' settles.
func RunSemaphore(ctx context.Context, t Target, w Workload, rounds int, quiet *Quiet) ([]*Row, error) {
	type result struct {
		rows []*Row
		err  error
	}
	done := make(chan result, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		rows, err := runSemaphore(rctx, t, w, rounds, quiet)
		done <- result{rows, err}
	}()
	limit := connectTimeout + w.Duration + time.Duration(rounds)*2*opTimeout + scaleSlack
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.rows, r.err
	case <-timer.C:
		err := fmt.Errorf("%w: the run did not end within %v", ErrStuck, limit)
		return []*Row{SkippedRow(t, w, err.Error())}, err
	}
}

func runSemaphore(ctx context.Context, t Target, w Workload, rounds int, quiet *Quiet) (rows []*Row, err error) {
	octx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var dcs, fcs []Client
	defer func() {
		for _, c := range append(dcs, fcs...) {
			c.Close()
		}
	}()
	fencing := false
	for range w.Clients {
		c, err := openSemDlock(octx, t, w.Permits)
		if err != nil {
			return []*Row{SkippedRow(t, w, "open: "+err.Error())}, nil
		}
		dcs = append(dcs, c)
		caps := c.l.Capabilities()
		if caps.MaxPermits == 0 {
			return nil, fmt.Errorf("bench: %s: %w", t.Name, errNoSemaphores)
		}
		if caps.MaxPermits < w.Permits {
			return []*Row{SkippedRow(t, w, fmt.Sprintf("%d permits exceed the backend's maximum of %d", w.Permits, caps.MaxPermits))}, nil
		}
		fencing = caps.Fencing
	}
	floorNote := ""
	if open := semFloors[t.Backend]; open != nil {
		for range w.Clients {
			c, err := open(octx, ServerURL(t.URL), w.Permits)
			if err != nil {
				for _, c := range fcs {
					c.Close()
				}
				fcs, floorNote = nil, "no floor: "+err.Error()
				break
			}
			fcs = append(fcs, c)
		}
	}
	name := fmt.Sprintf("dlockbench-%04x-sem", rand.Uint32()&0xffff)
	// One permit taken and freed by every client: connections, scripts,
	// rows and parent nodes are warm.
	for _, cs := range [][]Client{dcs, fcs} {
		for _, c := range cs {
			if err := warmUp(octx, c, name, 0); err != nil {
				return []*Row{SkippedRow(t, w, "warm up: "+err.Error())}, nil
			}
		}
	}
	dside, fside := newSemSide(w), newSemSide(w)
	slice := w.Duration / time.Duration(2*max(rounds, 1))
	var dsettle, fsettle SettleWait
	for r := range rounds {
		runDlock := func() {
			dsettle.add(quiet.Settle(ctx, t.Server))
			dside.slice(ctx, r, dcs, name, w, slice, fencing)
		}
		runFloor := func() {
			fsettle.add(quiet.Settle(ctx, t.Server))
			fside.slice(ctx, r, fcs, name, w, slice, true)
		}
		switch {
		case fcs == nil:
			runDlock()
		case r%2 == 0:
			runDlock()
			runFloor()
		default:
			runFloor()
			runDlock()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if dside.st.grants.Load() == 0 {
		return []*Row{SkippedRow(t, w, "no grant: "+dside.st.lastErr)}, nil
	}
	drow := dside.row(t, w, KindDlock, t.Name)
	drow.Note = joinNote(drow.Note, floorNote)
	drow.Params["rounds"] = rounds
	drow.Params["slice"] = slice.String()
	if dsettle.Settles > 0 {
		drow.Settle = &dsettle
	}
	var failed uint64
	for _, c := range dcs {
		failed += c.FailedAttempts()
	}
	drow.FailedPerGrant = float64(failed) / float64(drow.Grants)
	rows = []*Row{drow}
	if fcs != nil && fside.st.grants.Load() > 0 {
		frow := fside.row(t, w, KindFloor, "floor "+t.Name)
		frow.Note = SemaphoreFloorNote(t.Backend)
		frow.Params["rounds"] = rounds
		frow.Params["slice"] = slice.String()
		if fsettle.Settles > 0 {
			frow.Settle = &fsettle
		}
		drow.Floor = frow.Backend
		drow.FloorRate = frow.Rate
		drow.RateToFloor = pairRatio(drow, frow, rateOf)
		rows = append(rows, frow)
	}
	return rows, nil
}
