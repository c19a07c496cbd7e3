package bench

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/stats"
)

// Row is one target × workload configuration in the report. Durations
// are nanoseconds. A ratio of 0 means "no reference to compare with".
type Row struct {
	// Backend is the row label: the dlock backend and strategy
	// ("redis", "postgres/advisory"), a peer ("redsync"), a floor
	// ("floor redis") or a raw round trip ("rtt redis").
	Backend string `json:"backend"`
	// Family is the server it ran on: memory, redis, zookeeper, postgres, mysql.
	Family string `json:"family"`
	// Server is the server instance (peers are compared on the same one).
	Server string `json:"server,omitempty"`
	// Kind is dlock, peer, floor or rtt.
	Kind string `json:"kind"`
	URL  string `json:"url,omitempty"`
	Note string `json:"note,omitempty"`
	// Workload is the kind; Label the configuration; Params its parameters.
	Workload string         `json:"workload"`
	Label    string         `json:"label"`
	Params   map[string]any `json:"params"`
	Procs    int            `json:"procs"`

	// Acquire latency (open loop: from the intended start).
	P50  int64 `json:"p50_ns"`
	P99  int64 `json:"p99_ns"`
	P999 int64 `json:"p999_ns"`
	// Release latency.
	ReleaseP50  int64 `json:"release_p50_ns"`
	ReleaseP99  int64 `json:"release_p99_ns"`
	ReleaseP999 int64 `json:"release_p999_ns"`

	Grants uint64 `json:"grants"`
	// GrantsPerSec is Rate's median, the figure the tables print.
	GrantsPerSec float64 `json:"-"`
	// Rate is grants per second, one value per round.
	Rate *stats.Interval `json:"grants_per_sec"`
	// Use is one uncontended lock use (acquire p50 + release p50) in
	// nanoseconds, one value per round.
	Use *stats.Interval `json:"use_ns"`
	// HoldNs is the measured hold (p50 of what each hold really took: a
	// 1ms sleep in the kernel, testenv.Hold, wakes some tens of µs late, more
	// when the machine's CPUs are busy).
	HoldNs int64 `json:"hold_ns"`
	// Ideal is the contended rate a perfect lock would reach on one hot
	// name, from the measured hold and the gap of a handover on the same
	// server (see Ideal); ToIdeal is this row's rate over it, paired per
	// round. IdealGap is that gap per round: the floor's release plus
	// one round trip, both paced by the configuration's hold (Paced),
	// measured in the same round as the row.
	Ideal    *stats.Interval `json:"ideal_grants_per_sec"`
	ToIdeal  *stats.Interval `json:"ratio_to_ideal"`
	IdealGap *stats.Interval `json:"ideal_gap_ns"`
	// IdealGapHot is the gap from the uncontended workload's tight loop
	// instead (the floor's release p50 plus the round trip's), the
	// ideal's gap before it was paced; IdealHot and ToIdealHot are the
	// ideal from it and this row's rate over that. They are kept for
	// comparison: a release after a hold is a cold round trip, which
	// the hot gap leaves out.
	IdealGapHot int64           `json:"ideal_gap_hot_ns"`
	IdealHot    *stats.Interval `json:"ideal_hot_grants_per_sec"`
	ToIdealHot  *stats.Interval `json:"ratio_to_ideal_hot"`

	// BaselineRTT is the server's raw round trip, same run: the median
	// over the rounds of the round trip row's p50.
	BaselineRTT int64 `json:"baseline_rtt_ns"`
	// FloorNs is the median lock use (acquire + release p50) of the
	// strategy's hand-written floor, same run; ToFloor is this row's
	// lock use over the floor's, paired per round (uncontended only).
	Floor   string          `json:"floor,omitempty"`
	FloorNs int64           `json:"floor_ns"`
	ToFloor *stats.Interval `json:"ratio_to_floor"`
	ToRTT   *stats.Interval `json:"ratio_to_rtt"`
	// Peer is the peer library on the same server that did best in most
	// rounds of this workload (lowest lock use uncontended, highest
	// grants/s otherwise), and ToPeer this row over the best peer of each
	// round, paired per round (lock use ratio uncontended: lower is
	// better; grants/s ratio otherwise: higher is better).
	Peer   string          `json:"peer,omitempty"`
	ToPeer *stats.Interval `json:"ratio_to_peer"`

	// RoundP99 is the median over the rounds of each round's acquire p99,
	// with its interval: what the verdict ranks open loops by (P99, from
	// the merged rounds, has no interval). Open loop only.
	RoundP99 *stats.Interval `json:"acquire_p99_of_rounds_ns"`

	// Caps is what the dlock driver declares (dlock rows only; nil for
	// others), for the verdict's safety table.
	Caps *driver.Capabilities `json:"capabilities,omitempty"`

	// Rounds holds the per-round figures the intervals are built from.
	Rounds []RoundFigures `json:"-"`

	HandoffP50 int64 `json:"handoff_p50_ns"`
	HandoffP99 int64 `json:"handoff_p99_ns"`
	Handoffs   int64 `json:"handoffs"`
	// Jain is Jain's fairness index over the grants per client (1 = equal).
	Jain    float64 `json:"jain"`
	MaxWait int64   `json:"max_wait_ns"`
	// Violations counts two holders at once (checked in every process);
	// FencingViolations counts tokens that did not increase.
	Violations        uint64  `json:"violations"`
	FencingViolations uint64  `json:"fencing_violations"`
	FailedPerGrant    float64 `json:"failed_attempts_per_grant"`
	Errors            uint64  `json:"errors"`
	LastError         string  `json:"last_error,omitempty"`
	// Server work per grant; -1 where the server does not say.
	ServerCmdsPerGrant  float64 `json:"server_cmds_per_grant"`
	ServerCPUPerGrantNs float64 `json:"server_cpu_per_grant_ns"`
	// ServerReqsPerGrant is the requests per grant, a script call being
	// one (ServerSample.Requests); only on the waiters curve's dlock Redis
	// rows, -1 elsewhere.
	ServerReqsPerGrant float64 `json:"server_requests_per_grant"`

	// Percentiles of acquire latency and the handoff CDF, for the charts:
	// [quantile, ns] pairs.
	Latency    [][2]float64 `json:"latency_percentiles_ns,omitempty"`
	HandoffCDF [][2]float64 `json:"handoff_cdf_ns,omitempty"`

	// The scale curves (scale.go). FloorRate is the floor's grants/s at
	// the same concurrency and names, and RateToFloor this row's grants/s
	// over it, paired per round (names; higher is better). CorePct is the
	// share of one core (%) that the held leases cost, at the lease TTL
	// in Params; CorePctDefaultTTL the same scaled to dlock.DefaultTTL's
	// refreshes per second (leases).
	FloorRate         *stats.Interval `json:"floor_grants_per_sec,omitempty"`
	RateToFloor       *stats.Interval `json:"ratio_rate_to_floor,omitempty"`
	CorePct           *float64        `json:"keepalive_core_pct,omitempty"`
	CorePctDefaultTTL *float64        `json:"keepalive_default_ttl_core_pct,omitempty"`

	// Settle sums the settles before the row's slices (Quiet), and
	// SettleRounds gives them round by round, beside the round's figures
	// and what the other servers did during its slices.
	Settle       *SettleWait   `json:"settle,omitempty"`
	SettleRounds []RoundSettle `json:"settle_rounds,omitempty"`

	// Skipped says why the row was not measured.
	Skipped string `json:"skipped,omitempty"`
}

// RoundFigures is what one round of a row measured.
type RoundFigures struct {
	// Round is the round's index in its workload: figures of two rows
	// with the same index were measured side by side (Finalize pairs them).
	Round int
	// UseNs is acquire p50 + release p50 (uncontended lock use).
	UseNs        float64
	GrantsPerSec float64
	HoldNs       float64
	// P99Ns is the round's acquire p99 (the open loop's figure: latency
	// from the intended start).
	P99Ns float64
	// Settle and Background: the round's settling (Quiet) and what the
	// other servers did during its slice.
	Settle     SettleWait
	Background *Background
}

// useNs is the p50 cost of one uncontended lock use: Use's median when
// the row has rounds, else the merged histograms' p50s.
func (r *Row) useNs() int64 {
	if r.Use != nil {
		return int64(r.Use.Median)
	}
	return r.P50 + r.ReleaseP50
}

// Med is an interval's median, 0 for none (a figure that does not apply).
func Med(iv *stats.Interval) float64 {
	if iv == nil {
		return 0
	}
	return iv.Median
}

// Report is a whole run.
type Report struct {
	Started    time.Time     `json:"started"`
	Duration   time.Duration `json:"duration_ns"`
	DurationS  string        `json:"duration"`
	Command    string        `json:"command"`
	GoVersion  string        `json:"go_version"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	NumCPU     int           `json:"num_cpu"`
	Host       string        `json:"host"`
	Quick      bool          `json:"quick"`
	Procs      int           `json:"procs"`
	// WarmCPUs: the CPUs were kept out of their idle state during the
	// run (dlockbench -warm-cpus, WarmCPUs).
	WarmCPUs bool `json:"warm_cpus,omitempty"`
	// ClientCPUs and ServerCPUs are the CPUs the clients and the servers
	// dlockbench started ran on during PinnedWorkloads ("uncontended":
	// those workloads; "all": the whole run) (dlockbench -pin-cpus,
	// PinCPUs); empty when the kernel placed them.
	ClientCPUs      string            `json:"client_cpus,omitempty"`
	ServerCPUs      string            `json:"server_cpus,omitempty"`
	PinnedWorkloads string            `json:"pinned_workloads,omitempty"`
	Servers         []*Server         `json:"servers"`
	Skipped         []string          `json:"skipped,omitempty"`
	Peers           map[string]string `json:"peers"`
	// Rounds is how many rounds each contended workload ran, its targets
	// alternating within each (the uncontended workload, whose rounds
	// are short turns in one process, runs at least AlternatingRounds;
	// each row's params say how many).
	Rounds int `json:"rounds"`
	// Load is the machine's load during the run.
	Load *Load `json:"load"`
	// Settle is how the run settled the servers before its slices
	// (Quiet); nil when it could not watch them.
	Settle *SettleSummary `json:"settle,omitempty"`
	// Verdict is what the run concludes (Decide).
	Verdict *Verdict `json:"verdict"`
	Rows    []*Row   `json:"rows"`
	// Paced are the references of the handoff and fairness rows' ideal,
	// measured in their rounds (Pacer); they are not rows: nothing
	// competes with them.
	Paced []*Paced `json:"paced_references,omitempty"`
}

// Load is the machine's load during a run, from /proc: the figures are
// only as good as the machine was quiet.
type Load struct {
	// Avg1 is the one-minute load average at the start and the end.
	Avg1Start float64 `json:"loadavg1_start"`
	Avg1End   float64 `json:"loadavg1_end"`
	// BusyPct is the machine's CPU busy share during the run (all
	// processes), OtherPct the share used by processes other than this
	// benchmark, its children and the servers it measured.
	BusyPct  float64 `json:"cpu_busy_pct"`
	OtherPct float64 `json:"cpu_other_pct"`
}

var quantiles = []float64{0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1}

// NewRow turns a result into a row (ratios are filled by Finalize).
func NewRow(res *Result) *Row {
	t, w := res.Target, res.Workload
	r := &Row{
		Backend: t.Name, Family: t.Backend, Server: t.Server, Kind: t.Kind, URL: t.RedactedURL(), Note: t.Note,
		Workload: w.Kind, Label: w.Label(), Params: w.Params(), Procs: res.Procs,
		Floor: t.Floor,
	}
	q := func(h *hdrhistogram.Histogram, p float64) int64 {
		if h.TotalCount() == 0 {
			return 0
		}
		return h.ValueAtQuantile(p)
	}
	r.P50, r.P99, r.P999 = q(res.Acquire, 50), q(res.Acquire, 99), q(res.Acquire, 99.9)
	r.ReleaseP50, r.ReleaseP99, r.ReleaseP999 = q(res.Release, 50), q(res.Release, 99), q(res.Release, 99.9)
	r.HandoffP50, r.HandoffP99 = q(res.Handoff, 50), q(res.Handoff, 99)
	r.Handoffs = res.Handoff.TotalCount()
	for _, g := range res.Grants {
		r.Grants += g
	}
	if res.Elapsed > 0 {
		r.GrantsPerSec = float64(r.Grants) / res.Elapsed.Seconds()
	}
	r.Jain = jain(res.Grants)
	r.MaxWait = res.MaxWait
	r.Violations, r.FencingViolations = res.Exclusion, res.Fencing
	r.Errors, r.LastError = res.Errors, res.LastErr
	if r.Grants > 0 {
		r.FailedPerGrant = float64(res.Failed) / float64(r.Grants)
	}
	r.ServerCmdsPerGrant, r.ServerCPUPerGrantNs, r.ServerReqsPerGrant = -1, -1, -1
	sampled := r.Grants // the grants the server readings surround
	if res.Server.Grants > 0 {
		sampled = res.Server.Grants
	}
	if sampled > 0 && res.Server.HasCommands {
		r.ServerCmdsPerGrant = float64(res.Server.Commands) / float64(sampled)
	}
	if sampled > 0 && res.Server.HasCPU {
		r.ServerCPUPerGrantNs = float64(res.Server.CPU) / float64(sampled)
	}
	for _, p := range quantiles {
		if res.Acquire.TotalCount() > 0 {
			r.Latency = append(r.Latency, [2]float64{p, float64(res.Acquire.ValueAtQuantile(p * 100))})
		}
	}
	if res.Handoff.TotalCount() > 0 && (w.Kind == Handoff || w.Kind == Fairness) {
		for i := 0; i <= 100; i++ {
			// Denser towards the tail: q = 1 − 10^(−3i/100).
			p := 1 - math.Pow(10, -3*float64(i)/100)
			if i == 100 {
				p = 1
			}
			r.HandoffCDF = append(r.HandoffCDF, [2]float64{p, float64(res.Handoff.ValueAtQuantile(p * 100))})
		}
	}
	return r
}

// Ideal is the contended rate a perfect lock would reach on one name:
// 1/(hold + gap) while a waiter is always ready, bounded by what the
// clients ask for, clients/(hold + work + gap). gap is the shortest
// handover the server allows: Finalize passes the strategy's floor's
// release, measured on the same server (a durable write where the
// floor's release is one), plus one round trip to tell the next holder,
// both measured after a pause of the hold as the rows' clients make one
// (Paced: a release after a millisecond idle is a cold round trip), in
// the same round as the row; and the measured hold (a 1ms testenv.Hold
// sleeps longer than 1 ms; the shortest of the configuration's rows in
// that round), so the ideal is reachable, not a bound made out of reach
// by construction.
func Ideal(hold, work, gap time.Duration, clients int) float64 {
	lockBound := 1 / (hold + gap).Seconds()
	if clients <= 0 {
		return lockBound
	}
	return min(lockBound, float64(clients)/(hold+work+gap).Seconds())
}

// jain is Jain's fairness index (Σx)²/(n·Σx²) over the grants per client.
func jain(xs []uint64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += float64(x)
		s2 += float64(x) * float64(x)
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

// SkippedRow records a target that could not be measured on a workload.
func SkippedRow(t Target, w Workload, why string) *Row {
	return &Row{Backend: t.Name, Family: t.Backend, Server: t.Server, Kind: t.Kind, URL: t.RedactedURL(), Note: t.Note,
		Workload: w.Kind, Label: w.Label(), Params: w.Params(), Skipped: why,
		ServerCmdsPerGrant: -1, ServerCPUPerGrantNs: -1, ServerReqsPerGrant: -1}
}

// Finalize fills the baselines and ratios of every row from the rows of
// the same run: the round trip and floor rows (uncontended), the ideal
// contended rate (from paced, the references measured in the handoff and
// fairness rounds; see Paced) and the best peer.
//
// Every ratio is paired per round, then summarised by its median and
// interval: round r of a row is compared with round r of the reference
// row, which ran right beside it (the targets of a workload alternate
// within each round), so noise that slows a whole round cancels out. Two
// rows pair the rounds both have. A row without rounds (measured once) is
// compared with the reference's median.
func Finalize(rows []*Row, targets []Target, paced []*Paced) {
	byName := map[string]Target{}
	for _, t := range targets {
		byName[t.Name] = t
	}
	// The references of a row on fresh names are the floor's and the
	// round trip's on fresh names; every other row's are those on one
	// name (the handoff's ideal among them).
	uncontended, fresh := map[string]*Row{}, map[string]*Row{}
	for _, r := range rows {
		switch {
		case r.Workload != Uncontended || r.Skipped != "":
		case r.IsFresh():
			fresh[r.Backend] = r
		default:
			uncontended[r.Backend] = r
		}
	}
	holds := shortestHolds(rows)
	for _, r := range rows {
		if r.Skipped != "" {
			continue
		}
		t := byName[r.Backend]
		refs := uncontended
		if r.IsFresh() {
			refs = fresh
		}
		rtt, floor := refs[t.RTT], refs[t.Floor]
		if rtt != nil {
			r.BaselineRTT = rtt.useNs()
		}
		if floor != nil {
			r.FloorNs = floor.useNs()
		}
		switch r.Workload {
		case Uncontended:
			r.ToFloor = pairRatio(r, floor, useOf)
			r.ToRTT = pairRatio(r, rtt, useOf)
		case Handoff, Fairness:
			var hot time.Duration
			if floor != nil {
				hot = handoverGap(floor, rtt)
				r.IdealGapHot = int64(hot)
				r.IdealHot, r.ToIdealHot, _ = ideal(r, func(int) time.Duration { return hot }, holds[r.Label])
			}
			hold := nominalHold(r)
			pf, pr := pacedRef(paced, hold, t.Floor), pacedRef(paced, hold, t.RTT)
			r.Ideal, r.ToIdeal, r.IdealGap = ideal(r, func(round int) time.Duration {
				// The round's paced gap; the hot one where the round has
				// none (a reference that failed, a row measured once).
				f, okF := pf.p50(round)
				n, okN := pr.p50(round)
				if !okF || !okN {
					return hot
				}
				return time.Duration(f + n)
			}, holds[r.Label])
		}
	}
	// Peers: in each round, the best peer on the same server and
	// configuration that round (the peers of a workload run in the same
	// rounds). Two peers that tie trade places from round to round and run
	// to run; the best of each round is a reference that does not jump
	// when they do (and the strictest one: a row is compared with whichever
	// peer did best beside it). Not in the open loop: each target is
	// offered a share of its own capacity there, so two rows' grants/s
	// compare offered rates, not locks.
	for _, r := range rows {
		if r.Skipped != "" || !(r.Kind == KindDlock || r.Kind == KindPeer) || r.Workload == OpenLoop {
			continue
		}
		var peers []*Row
		for _, p := range rows {
			if p.Kind == KindPeer && p != r && p.Server == r.Server && p.Label == r.Label && p.Skipped == "" && p.Grants > 0 {
				peers = append(peers, p)
			}
		}
		if len(peers) == 0 {
			continue
		}
		fig, better := rateOf, func(a, b float64) bool { return a > b }
		if r.Workload == Uncontended {
			fig, better = useOf, func(a, b float64) bool { return a < b }
		}
		best, name := bestPerRound(peers, fig, better)
		r.Peer = name
		r.ToPeer = pairRatio(r, best, fig)
	}
}

// bestPerRound returns a row whose rounds are, round by round, the best
// figure among peers (by better), and the name of the peer that was best
// in the most rounds (ties: the better median). Rows measured once count
// as one round.
func bestPerRound(peers []*Row, fig func(RoundFigures) float64, better func(a, b float64) bool) (*Row, string) {
	if slices.ContainsFunc(peers, func(p *Row) bool { return len(p.Rounds) == 0 }) {
		best := peers[0]
		for _, p := range peers[1:] {
			if better(med(p, fig), med(best, fig)) {
				best = p
			}
		}
		return best, best.Backend
	}
	type pick struct {
		f   RoundFigures
		row *Row
	}
	byRound := map[int]pick{}
	for _, p := range peers {
		for _, f := range p.Rounds {
			if fig(f) <= 0 {
				continue
			}
			if b, ok := byRound[f.Round]; !ok || better(fig(f), fig(b.f)) {
				byRound[f.Round] = pick{f, p}
			}
		}
	}
	wins := map[*Row]int{}
	out := &Row{}
	for _, b := range byRound {
		out.Rounds = append(out.Rounds, b.f)
		wins[b.row]++
	}
	var top *Row
	for _, p := range peers {
		if top == nil || wins[p] > wins[top] || (wins[p] == wins[top] && better(med(p, fig), med(top, fig))) {
			top = p
		}
	}
	return out, top.Backend
}

// med is the median of a row's per-round figure (its one figure when it
// was measured once).
func med(r *Row, fig func(RoundFigures) float64) float64 {
	rounds := r.rounds()
	xs := make([]float64, len(rounds))
	for i, f := range rounds {
		xs[i] = fig(f)
	}
	return stats.MedianCI(xs, Confidence).Median
}

func useOf(f RoundFigures) float64  { return f.UseNs }
func rateOf(f RoundFigures) float64 { return f.GrantsPerSec }

// rounds returns the row's per-round figures, or its medians as one
// round when it has none.
func (r *Row) rounds() []RoundFigures {
	if len(r.Rounds) > 0 {
		return r.Rounds
	}
	return []RoundFigures{{UseNs: float64(r.useNs()), GrantsPerSec: r.GrantsPerSec, HoldNs: float64(r.HoldNs)}}
}

// pairRatio is fig(a)/fig(ref) paired per round (the rounds both have),
// as a median with its interval; nil without a reference or a pair.
func pairRatio(a, ref *Row, fig func(RoundFigures) float64) *stats.Interval {
	if a == nil || ref == nil {
		return nil
	}
	if len(a.Rounds) == 0 || len(ref.Rounds) == 0 {
		// Measured once: no rounds to pair, the medians it is.
		x, y := fig(a.rounds()[0]), fig(ref.rounds()[0])
		if len(ref.Rounds) > 0 {
			y = fig(RoundFigures{UseNs: float64(ref.useNs()), GrantsPerSec: ref.GrantsPerSec})
		}
		if x <= 0 || y <= 0 {
			return nil
		}
		return one(x / y)
	}
	byRound := map[int]RoundFigures{}
	for _, f := range ref.Rounds {
		byRound[f.Round] = f
	}
	var xs []float64
	for _, f := range a.Rounds {
		if g, ok := byRound[f.Round]; ok && fig(f) > 0 && fig(g) > 0 {
			xs = append(xs, fig(f)/fig(g))
		}
	}
	return stats.MedianCI(xs, Confidence)
}

// handoverGap is the shortest handover the server allows: the floor's
// release (a durable write where the release is one) and then one round
// trip, the least a perfect lock needs to tell the next holder — a queued
// waiter need not send its own acquire (ZooKeeper's fair recipe does not).
// Without a round-trip row, the floor's acquire stands in for it.
func handoverGap(floor, rtt *Row) time.Duration {
	next := floor.P50
	if rtt != nil {
		next = rtt.useNs()
	}
	return time.Duration(floor.ReleaseP50 + next)
}

// shortestHolds returns, per workload configuration and round, the
// shortest measured hold of any row: what the hold's sleep takes on this
// machine. A client that spins while it waits stretches its own holds,
// and an ideal from its own hold would flatter it.
func shortestHolds(rows []*Row) map[string]map[int]float64 {
	out := map[string]map[int]float64{}
	for _, r := range rows {
		for _, f := range r.Rounds {
			if r.Skipped != "" || f.HoldNs <= 0 {
				continue
			}
			m := out[r.Label]
			if m == nil {
				m = map[int]float64{}
				out[r.Label] = m
			}
			if h, ok := m[f.Round]; !ok || f.HoldNs < h {
				m[f.Round] = f.HoldNs
			}
		}
	}
	return out
}

// pacedRef returns the reference measured on the target named name,
// paced by hold, or nil.
func pacedRef(paced []*Paced, hold time.Duration, name string) *Paced {
	if name == "" {
		return nil
	}
	for _, p := range paced {
		if p.HoldNs == int64(hold) && p.Backend == name {
			return p
		}
	}
	return nil
}

// nominalHold is the hold a row's configuration asks for (0 for none).
func nominalHold(r *Row) time.Duration {
	h, _ := time.ParseDuration(fmt.Sprint(r.Params["hold"]))
	return h
}

// ideal is the ideal contended rate of a handoff or fairness row (see
// Ideal), per round from that round's shortest measured hold (holds, by
// round) and gap (the server's shortest handover; a round whose gap is 0
// is left out), the row's rate over it, paired per round, and the gaps.
// All nil without a round.
func ideal(r *Row, gapOf func(round int) time.Duration, holds map[int]float64) (ideal, toIdeal, gaps *stats.Interval) {
	nominal := nominalHold(r)
	work := time.Duration(0)
	if w, err := time.ParseDuration(fmt.Sprint(r.Params["work"])); err == nil {
		work = w
	}
	clients := int(toFloat(r.Params["clients"]))
	var ideals, ratios, gapNs []float64
	for _, f := range r.rounds() {
		gap := gapOf(f.Round)
		if gap <= 0 {
			continue
		}
		hold := time.Duration(holds[f.Round])
		if hold <= 0 {
			// No hold measured (none asked for, or a row built without
			// one): the nominal hold.
			hold = nominal
		}
		v := Ideal(hold, work, gap, clients)
		ideals, gapNs = append(ideals, v), append(gapNs, float64(gap))
		if f.GrantsPerSec > 0 {
			ratios = append(ratios, f.GrantsPerSec/v)
		}
	}
	if len(ideals) == 0 {
		return nil, nil, nil
	}
	return stats.MedianCI(ideals, Confidence), stats.MedianCI(ratios, Confidence), stats.MedianCI(gapNs, Confidence)
}

// Labels returns the workload configurations of the rows, in run order.
func (rep *Report) Labels() []string {
	var out []string
	for _, r := range rep.Rows {
		if !slices.Contains(out, r.Label) {
			out = append(out, r.Label)
		}
	}
	return out
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	}
	return 0
}

// one is a figure measured once: an interval of one round.
func one(v float64) *stats.Interval { return stats.MedianCI([]float64{v}, 0.95) }
