package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/stats"
)

// WriteFiles writes report.json, report.csv and index.html into dir.
func (rep *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.csv"))
	if err != nil {
		return err
	}
	if err := rep.WriteCSV(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	h, err := os.Create(filepath.Join(dir, "index.html"))
	if err != nil {
		return err
	}
	if err := rep.WriteHTML(h); err != nil {
		h.Close()
		return err
	}
	return h.Close()
}

// plainRow is a Row without its methods, so that rowJSON can embed it
// without calling Row's MarshalJSON again.
type plainRow Row

// deepRow puts the Row's fields one level below applicable's in rowJSON:
// encoding/json writes the shallower of two fields of one name, so
// applicable's replace the Row's.
type deepRow struct{ *plainRow }

// applicable holds the figures of a row that do not apply to every row, as
// report.json and report.csv write them: nil where the figure does not
// apply (a skipped row, a round trip's release, a handoff figure outside
// the handoff and fairness workloads, a server that does not count its
// commands, ...) instead of the 0 or -1 the Row holds.
type applicable struct {
	Procs       *int    `json:"procs"`
	P50         *int64  `json:"p50_ns"`
	P99         *int64  `json:"p99_ns"`
	P999        *int64  `json:"p999_ns"`
	ReleaseP50  *int64  `json:"release_p50_ns"`
	ReleaseP99  *int64  `json:"release_p99_ns"`
	ReleaseP999 *int64  `json:"release_p999_ns"`
	Grants      *uint64 `json:"grants"`

	Rate        *stats.Interval `json:"grants_per_sec"`
	Use         *stats.Interval `json:"use_ns"`
	HoldNs      *int64          `json:"hold_ns"`
	BaselineRTT *int64          `json:"baseline_rtt_ns"`
	FloorNs     *int64          `json:"floor_ns"`
	IdealGapHot *int64          `json:"ideal_gap_hot_ns"`

	Handoffs          *int64   `json:"handoffs"`
	HandoffP50        *int64   `json:"handoff_p50_ns"`
	HandoffP99        *int64   `json:"handoff_p99_ns"`
	Jain              *float64 `json:"jain"`
	MaxWait           *int64   `json:"max_wait_ns"`
	Violations        *uint64  `json:"violations"`
	FencingViolations *uint64  `json:"fencing_violations"`
	FailedPerGrant    *float64 `json:"failed_attempts_per_grant"`
	Errors            *uint64  `json:"errors"`

	ServerCmdsPerGrant  *float64 `json:"server_cmds_per_grant"`
	ServerCPUPerGrantNs *float64 `json:"server_cpu_per_grant_ns"`
	ServerReqsPerGrant  *float64 `json:"server_requests_per_grant"`
}

// rowJSON is a Row as report.json writes it: the Row's own fields, with
// the fields of applicable, the capabilities and the two curves in their
// place.
type rowJSON struct {
	deepRow
	applicable
	Caps *capsJSON `json:"capabilities,omitempty"`
	// The curves are [quantile, ns] pairs; their names carry the unit.
	Latency    [][2]float64 `json:"latency_percentiles_ns,omitempty"`
	HandoffCDF [][2]float64 `json:"handoff_cdf_ns,omitempty"`
}

// capsJSON is driver.Capabilities with a unit in every numeric name and
// null for a limit that is the portable default or none.
type capsJSON struct {
	Backend              string `json:"backend"`
	Strategy             string `json:"strategy"`
	Fencing              bool   `json:"fencing"`
	FencingNote          string `json:"fencing_note,omitempty"`
	TokensSurviveRestart bool   `json:"tokens_survive_restart"`
	Fair                 bool   `json:"fair"`
	Wait                 string `json:"wait"`
	SessionBound         bool   `json:"session_bound"`
	// ReleaseOnCrashNs is how long after its holder dies a lock is free
	// at the latest; null with ReleaseAfterTTL: after the lease TTL.
	ReleaseOnCrashNs *int64 `json:"release_on_crash_ns"`
	ReleaseAfterTTL  bool   `json:"release_after_ttl"`
	// Null: the portable limit (1024 bytes), the portable minimum TTL,
	// no maximum TTL.
	MaxNameLenBytes *int   `json:"max_name_len_bytes"`
	MinTTLNs        *int64 `json:"min_ttl_ns"`
	MaxTTLNs        *int64 `json:"max_ttl_ns"`
	Reentrant       bool   `json:"reentrant"`
	Notes           string `json:"notes,omitempty"`
}

// some returns a pointer to v when ok, else nil: "does not apply".
func some[T any](v T, ok bool) *T {
	if !ok {
		return nil
	}
	return &v
}

// value is *p, or def for nil.
func value[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// contended reports whether a workload hands one hot name from holder to
// holder, where handoff figures, the hold and the ideal apply.
func contended(workload string) bool { return workload == Handoff || workload == Fairness }

// applicableOf returns r's figures with nil where one does not apply.
func applicableOf(r *Row) applicable {
	measured := r.Skipped == ""
	granted := measured && r.Grants > 0
	// The checker sees the critical sections of locks that can be
	// contended; a floor and a round trip only run alone.
	checked := measured && (r.Kind == KindDlock || r.Kind == KindPeer)
	// A round trip has nothing to release.
	released := granted && r.Kind != KindRTT
	hand := measured && contended(r.Workload)
	// The scale curves measure rates, CPU and commands, no latency.
	timed := granted && r.Workload != Scale
	released = released && timed
	f := applicable{
		Procs: some(r.Procs, measured),
		P50:   some(r.P50, timed), P99: some(r.P99, timed), P999: some(r.P999, timed),
		ReleaseP50: some(r.ReleaseP50, released), ReleaseP99: some(r.ReleaseP99, released),
		ReleaseP999: some(r.ReleaseP999, released),
		Grants:      some(r.Grants, measured),
		Rate:        r.Rate,
		HoldNs:      some(r.HoldNs, measured && r.HoldNs > 0),
		BaselineRTT: some(r.BaselineRTT, measured && r.BaselineRTT > 0),
		FloorNs:     some(r.FloorNs, measured && r.FloorNs > 0),
		IdealGapHot: some(r.IdealGapHot, hand && r.IdealGapHot > 0),
		Handoffs:    some(r.Handoffs, hand),
		HandoffP50:  some(r.HandoffP50, hand && r.Handoffs > 0),
		HandoffP99:  some(r.HandoffP99, hand && r.Handoffs > 0),
		// One client's share of the grants is always all of them.
		Jain:       some(r.Jain, granted && r.Workload != Uncontended),
		MaxWait:    some(r.MaxWait, timed),
		Violations: some(r.Violations, checked),
		// Tokens are checked where the driver promises fencing.
		FencingViolations:   some(r.FencingViolations, checked && r.Kind == KindDlock && (r.Caps == nil || r.Caps.Fencing)),
		FailedPerGrant:      some(r.FailedPerGrant, granted && r.Kind != KindRTT),
		Errors:              some(r.Errors, measured),
		ServerCmdsPerGrant:  some(r.ServerCmdsPerGrant, granted && r.ServerCmdsPerGrant >= 0),
		ServerCPUPerGrantNs: some(r.ServerCPUPerGrantNs, granted && r.ServerCPUPerGrantNs >= 0),
		ServerReqsPerGrant:  some(r.ServerReqsPerGrant, granted && r.ServerReqsPerGrant >= 0),
	}
	// A row built from one result has no interval: it is one round.
	// A lease held is no grant per second (the leases curve).
	if f.Rate == nil && measured && !(r.Workload == Scale && r.Params["axis"] == ScaleLeases) {
		f.Rate = one(r.GrantsPerSec)
	}
	if r.Workload == Uncontended && granted {
		f.Use = r.Use
		if f.Use == nil {
			f.Use = one(float64(r.useNs()))
		}
	}
	return f
}

// MarshalJSON writes the row with null for every figure that does not
// apply to it (see applicable).
func (r Row) MarshalJSON() ([]byte, error) {
	return json.Marshal(rowJSON{deepRow: deepRow{(*plainRow)(&r)}, applicable: applicableOf(&r), Caps: toCapsJSON(r.Caps),
		Latency: r.Latency, HandoffCDF: r.HandoffCDF})
}

// UnmarshalJSON reads a row written by MarshalJSON: a null figure becomes
// the Row's "does not apply" value again (0, or -1 for the server's
// counters), and GrantsPerSec Rate's median.
func (r *Row) UnmarshalJSON(b []byte) error {
	*r = Row{}
	j := rowJSON{deepRow: deepRow{(*plainRow)(r)}}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	f := j.applicable
	r.Procs = value(f.Procs, 0)
	r.P50, r.P99, r.P999 = value(f.P50, 0), value(f.P99, 0), value(f.P999, 0)
	r.ReleaseP50, r.ReleaseP99, r.ReleaseP999 = value(f.ReleaseP50, 0), value(f.ReleaseP99, 0), value(f.ReleaseP999, 0)
	r.Grants = value(f.Grants, 0)
	r.Rate, r.Use, r.GrantsPerSec = f.Rate, f.Use, Med(f.Rate)
	r.HoldNs, r.BaselineRTT, r.FloorNs = value(f.HoldNs, 0), value(f.BaselineRTT, 0), value(f.FloorNs, 0)
	r.IdealGapHot = value(f.IdealGapHot, 0)
	r.Handoffs, r.HandoffP50, r.HandoffP99 = value(f.Handoffs, 0), value(f.HandoffP50, 0), value(f.HandoffP99, 0)
	r.Jain, r.MaxWait = value(f.Jain, 0), value(f.MaxWait, 0)
	r.Violations, r.FencingViolations = value(f.Violations, 0), value(f.FencingViolations, 0)
	r.FailedPerGrant, r.Errors = value(f.FailedPerGrant, 0), value(f.Errors, 0)
	r.ServerCmdsPerGrant, r.ServerCPUPerGrantNs = value(f.ServerCmdsPerGrant, -1), value(f.ServerCPUPerGrantNs, -1)
	r.ServerReqsPerGrant = value(f.ServerReqsPerGrant, -1)
	r.Caps = j.Caps.capabilities()
	r.Latency, r.HandoffCDF = j.Latency, j.HandoffCDF
	return nil
}

func toCapsJSON(c *driver.Capabilities) *capsJSON {
	if c == nil {
		return nil
	}
	ns := func(d time.Duration) *int64 { return some(int64(d), d > 0) }
	return &capsJSON{
		Backend: c.Backend, Strategy: c.Strategy, Fencing: c.Fencing, FencingNote: c.FencingNote,
		TokensSurviveRestart: c.TokensSurviveRestart, Fair: c.Fair, Wait: string(c.Wait), SessionBound: c.SessionBound,
		ReleaseOnCrashNs: some(int64(c.ReleaseOnCrash), c.ReleaseOnCrash >= 0),
		ReleaseAfterTTL:  c.ReleaseOnCrash == driver.ReleaseAfterTTL,
		MaxNameLenBytes:  some(c.MaxNameLen, c.MaxNameLen > 0),
		MinTTLNs:         ns(c.MinTTL), MaxTTLNs: ns(c.MaxTTL),
		Reentrant: c.Reentrant, Notes: c.Notes,
	}
}

func (c *capsJSON) capabilities() *driver.Capabilities {
	if c == nil {
		return nil
	}
	crash := time.Duration(value(c.ReleaseOnCrashNs, 0))
	if c.ReleaseAfterTTL {
		crash = driver.ReleaseAfterTTL
	}
	return &driver.Capabilities{
		Backend: c.Backend, Strategy: c.Strategy, Fencing: c.Fencing, FencingNote: c.FencingNote,
		TokensSurviveRestart: c.TokensSurviveRestart, Fair: c.Fair, Wait: driver.WaitKind(c.Wait),
		SessionBound: c.SessionBound, ReleaseOnCrash: crash, MaxNameLen: value(c.MaxNameLenBytes, 0),
		MinTTL: time.Duration(value(c.MinTTLNs, 0)), MaxTTL: time.Duration(value(c.MaxTTLNs, 0)),
		Reentrant: c.Reentrant, Notes: c.Notes,
	}
}

// headline returns the intervals a row is judged by: lock use and its
// ratios uncontended, the rate and its ratios otherwise. A figure that
// does not apply is left out.
func headline(r *Row, f applicable) []*stats.Interval {
	var ivs []*stats.Interval
	if r.Workload == Uncontended {
		ivs = []*stats.Interval{f.Use, r.ToFloor, r.ToRTT, r.ToPeer}
	} else {
		ivs = []*stats.Interval{f.Rate, r.Ideal, r.ToIdeal, r.ToPeer, r.RoundP99, r.RateToFloor}
	}
	out := ivs[:0]
	for _, iv := range ivs {
		if iv != nil {
			out = append(out, iv)
		}
	}
	return out
}

// unsettled reports whether a figure's interval is wider than
// ±WideInterval of its median.
func unsettled(iv *stats.Interval) bool { return iv != nil && iv.Wide(WideInterval) }

// csvIntervals are the interval columns of report.csv, each written as
// three: the median under the figure's name, then name_lo and name_hi.
var csvIntervals = []struct {
	name string
	get  func(*Row, applicable) *stats.Interval
}{
	{"grants_per_sec", func(_ *Row, f applicable) *stats.Interval { return f.Rate }},
	{"use_ns", func(_ *Row, f applicable) *stats.Interval { return f.Use }},
	{"ideal_grants_per_sec", func(r *Row, _ applicable) *stats.Interval { return r.Ideal }},
	{"ratio_to_ideal", func(r *Row, _ applicable) *stats.Interval { return r.ToIdeal }},
	{"ratio_to_floor", func(r *Row, _ applicable) *stats.Interval { return r.ToFloor }},
	{"ratio_to_rtt", func(r *Row, _ applicable) *stats.Interval { return r.ToRTT }},
	{"ratio_to_peer", func(r *Row, _ applicable) *stats.Interval { return r.ToPeer }},
	{"acquire_p99_of_rounds_ns", func(r *Row, _ applicable) *stats.Interval { return r.RoundP99 }},
	{"floor_grants_per_sec", func(r *Row, _ applicable) *stats.Interval { return r.FloorRate }},
	{"ratio_rate_to_floor", func(r *Row, _ applicable) *stats.Interval { return r.RateToFloor }},
}

// csvHeader returns report.csv's header: every numeric column's name
// carries its unit (_ns, _per_sec, _per_grant) or is a count or a ratio.
func csvHeader() []string {
	h := []string{"backend", "family", "kind", "workload", "label", "clients", "procs", "rounds", "report_rounds",
		"p50_ns", "p99_ns", "p999_ns", "release_p50_ns", "release_p99_ns", "release_p999_ns", "grants"}
	for _, c := range csvIntervals {
		h = append(h, c.name, c.name+"_lo", c.name+"_hi")
	}
	return append(h, "interval_confidence", "interval_wide",
		"hold_ns", "baseline_rtt_ns", "floor", "floor_ns", "peer",
		"handoffs", "handoff_p50_ns", "handoff_p99_ns", "jain", "max_wait_ns", "violations", "fencing_violations",
		"failed_attempts_per_grant", "errors", "server_cmds_per_grant", "server_cpu_per_grant_ns",
		"keepalive_core_pct", "keepalive_default_ttl_core_pct", "server_requests_per_grant", "skipped")
}

// cell formats a figure for report.csv: an empty cell when it does not apply.
func cell[T int | int64 | uint64 | float64](p *T) string {
	switch v := any(p).(type) {
	case *int:
		if v != nil {
			return strconv.Itoa(*v)
		}
	case *int64:
		if v != nil {
			return strconv.FormatInt(*v, 10)
		}
	case *uint64:
		if v != nil {
			return strconv.FormatUint(*v, 10)
		}
	case *float64:
		if v != nil {
			return strconv.FormatFloat(*v, 'g', 6, 64)
		}
	}
	return ""
}

// WriteCSV writes one line per row, the header first. A figure that does
// not apply is an empty cell; each interval is three columns (median, lo,
// hi); interval_wide says whether any of the row's headline intervals is
// wider than ±WideInterval.
func (rep *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader()); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		f := applicableOf(r)
		clients := ""
		if c, ok := r.Params["clients"]; ok {
			clients = fmt.Sprint(c)
		}
		rounds, conf := 0, 1.0
		var ivCells []string
		for _, c := range csvIntervals {
			iv := c.get(r, f)
			if iv == nil {
				ivCells = append(ivCells, "", "", "")
				continue
			}
			rounds, conf = max(rounds, iv.Rounds), min(conf, iv.Confidence)
			ivCells = append(ivCells, cell(&iv.Median), cell(&iv.Lo), cell(&iv.Hi))
		}
		wide := ""
		if hl := headline(r, f); len(hl) > 0 {
			wide = "false"
			for _, iv := range hl {
				if unsettled(iv) {
					wide = "true"
				}
			}
		}
		line := []string{r.Backend, r.Family, r.Kind, r.Workload, r.Label, clients, cell(f.Procs),
			cell(some(rounds, rounds > 0)), cell(some(rep.Rounds, rep.Rounds > 0)),
			cell(f.P50), cell(f.P99), cell(f.P999), cell(f.ReleaseP50), cell(f.ReleaseP99), cell(f.ReleaseP999),
			cell(f.Grants)}
		line = append(line, ivCells...)
		line = append(line, cell(some(conf, rounds > 0)), wide,
			cell(f.HoldNs), cell(f.BaselineRTT), r.Floor, cell(f.FloorNs), r.Peer,
			cell(f.Handoffs), cell(f.HandoffP50), cell(f.HandoffP99), cell(f.Jain), cell(f.MaxWait),
			cell(f.Violations), cell(f.FencingViolations), cell(f.FailedPerGrant), cell(f.Errors),
			cell(f.ServerCmdsPerGrant), cell(f.ServerCPUPerGrantNs), cell(r.CorePct), cell(r.CorePctDefaultTTL),
			cell(f.ServerReqsPerGrant), r.Skipped)
		if err := cw.Write(line); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
