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
	// HoldNs is the measured hold (p50 of what each hold really took:
	// time.Sleep(1ms) sleeps longer than 1 ms).
	HoldNs int64 `json:"hold_ns"`
	// Ideal is the contended rate a perfect lock would reach on one hot
	// name, from the measured hold and the floor's measured release and
	// acquire on the same server (see Ideal); ToIdeal is this row's rate
	// over it, paired per round.
	Ideal   *stats.Interval `json:"ideal_grants_per_sec"`
	ToIdeal *stats.Interval `json:"ratio_to_ideal"`

	// BaselineRTT is the p50 of the server's raw round trip, same run.
	BaselineRTT int64 `json:"baseline_rtt_ns"`
	// FloorNs is the median lock use (acquire + release p50) of the
	// strategy's hand-written floor, same run; ToFloor is this row's
	// lock use over the floor's, paired per round (uncontended only).
	Floor   string          `json:"floor,omitempty"`
	FloorNs int64           `json:"floor_ns"`
	ToFloor *stats.Interval `json:"ratio_to_floor"`
	ToRTT   *stats.Interval `json:"ratio_to_rtt"`
	// Peer is the best peer library on the same server for this workload
	// (lowest lock use uncontended, highest grants/s otherwise), and
	// ToPeer this row over it, paired per round (lock use ratio
	// uncontended: lower is better; grants/s ratio otherwise: higher is
	// better).
	Peer   string          `json:"peer,omitempty"`
	ToPeer *stats.Interval `json:"ratio_to_peer"`

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

	// Percentiles of acquire latency and the handoff CDF, for the charts:
	// [quantile, ns] pairs.
	Latency    [][2]float64 `json:"latency_percentiles,omitempty"`
	HandoffCDF [][2]float64 `json:"handoff_cdf,omitempty"`

	// Skipped says why the row was not measured.
	Skipped string `json:"skipped,omitempty"`
}

// RoundFigures is what one round of a row measured.
type RoundFigures struct {
	// UseNs is acquire p50 + release p50 (uncontended lock use).
	UseNs        float64
	GrantsPerSec float64
	HoldNs       float64
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
	Started    time.Time         `json:"started"`
	Duration   time.Duration     `json:"duration_ns"`
	DurationS  string            `json:"duration"`
	Command    string            `json:"command"`
	GoVersion  string            `json:"go_version"`
	GOMAXPROCS int               `json:"gomaxprocs"`
	NumCPU     int               `json:"num_cpu"`
	Host       string            `json:"host"`
	Quick      bool              `json:"quick"`
	Procs      int               `json:"procs"`
	Servers    []*Server         `json:"servers"`
	Skipped    []string          `json:"skipped,omitempty"`
	Peers      map[string]string `json:"peers"`
	// Rounds is how many rounds each workload ran, its targets
	// alternating within each.
	Rounds int `json:"rounds"`
	// Load is the machine's load during the run.
	Load *Load `json:"load"`
	// Verdict is what the run concludes (Decide).
	Verdict *Verdict `json:"verdict"`
	Rows    []*Row   `json:"rows"`
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
	r.ServerCmdsPerGrant, r.ServerCPUPerGrantNs = -1, -1
	if r.Grants > 0 && res.Server.HasCommands {
		r.ServerCmdsPerGrant = float64(res.Server.Commands) / float64(r.Grants)
	}
	if r.Grants > 0 && res.Server.HasCPU {
		r.ServerCPUPerGrantNs = float64(res.Server.CPU) / float64(r.Grants)
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
// 1/(hold + one round trip) while a waiter is always ready, bounded by
// what the clients ask for, clients/(hold + work + one round trip).
func Ideal(hold, work, rtt time.Duration, clients int) float64 {
	lockBound := 1 / (hold + rtt).Seconds()
	if clients <= 0 {
		return lockBound
	}
	return min(lockBound, float64(clients)/(hold+work+rtt).Seconds())
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
		ServerCmdsPerGrant: -1, ServerCPUPerGrantNs: -1}
}

// Finalize fills the baselines and ratios of every row from the rows of
// the same run: the RTT and floor rows (uncontended) and the peers.
func Finalize(rows []*Row, targets []Target) {
	byName := map[string]Target{}
	for _, t := range targets {
		byName[t.Name] = t
	}
	uncontended := map[string]*Row{}
	for _, r := range rows {
		if r.Workload == Uncontended && r.Skipped == "" {
			uncontended[r.Backend] = r
		}
	}
	for _, r := range rows {
		if r.Skipped != "" {
			continue
		}
		t := byName[r.Backend]
		if rtt := uncontended[t.RTT]; rtt != nil {
			r.BaselineRTT = rtt.P50
		}
		if f := uncontended[t.Floor]; f != nil {
			r.FloorNs = f.useNs()
		}
		if r.Workload == Uncontended {
			if r.FloorNs > 0 {
				r.ToFloor = one(float64(r.useNs()) / float64(r.FloorNs))
			}
			if r.BaselineRTT > 0 {
				r.ToRTT = one(float64(r.useNs()) / float64(r.BaselineRTT))
			}
		}
		if r.Workload == Handoff || r.Workload == Fairness {
			hold := time.Duration(0)
			if h, err := time.ParseDuration(fmt.Sprint(r.Params["hold"])); err == nil {
				hold = h
			}
			work := time.Duration(0)
			if w, err := time.ParseDuration(fmt.Sprint(r.Params["work"])); err == nil {
				work = w
			}
			if r.BaselineRTT > 0 {
				ideal := Ideal(hold, work, time.Duration(r.BaselineRTT), int(toFloat(r.Params["clients"])))
				r.Ideal, r.ToIdeal = one(ideal), one(r.GrantsPerSec/ideal)
			}
		}
	}
	// Peers: the best peer on the same server and configuration.
	for _, r := range rows {
		if r.Skipped != "" || !(r.Kind == KindDlock || r.Kind == KindPeer) {
			continue
		}
		var best *Row
		for _, p := range rows {
			if p.Kind != KindPeer || p == r || p.Server != r.Server || p.Label != r.Label || p.Skipped != "" || p.Grants == 0 {
				continue
			}
			if best == nil || (r.Workload == Uncontended && p.useNs() < best.useNs()) ||
				(r.Workload != Uncontended && p.GrantsPerSec > best.GrantsPerSec) {
				best = p
			}
		}
		if best == nil {
			continue
		}
		r.Peer = best.Backend
		if r.Workload == Uncontended {
			if best.useNs() > 0 {
				r.ToPeer = one(float64(r.useNs()) / float64(best.useNs()))
			}
		} else if best.GrantsPerSec > 0 {
			r.ToPeer = one(r.GrantsPerSec / best.GrantsPerSec)
		}
	}
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
