package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
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

	Grants       uint64  `json:"grants"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	// IdealGrantsPerSec is 1/(hold + one round trip) for one hot name,
	// bounded by the clients' demand (see Ideal).
	IdealGrantsPerSec float64 `json:"ideal_grants_per_sec"`
	RatioToIdeal      float64 `json:"ratio_to_ideal"`

	// BaselineRTT is the p50 of the server's raw round trip, same run.
	BaselineRTT int64 `json:"baseline_rtt_ns"`
	// FloorNs is the p50 of one lock use (acquire + release) by the
	// strategy's hand-written floor, same run; RatioToFloor is this row's
	// p50 lock use (uncontended: acquire + release p50) over it.
	Floor        string  `json:"floor,omitempty"`
	FloorNs      int64   `json:"floor_ns"`
	RatioToFloor float64 `json:"ratio_to_floor"`
	RatioToRTT   float64 `json:"ratio_to_rtt"`
	// Peer is the best peer library on the same server for this workload
	// (lowest lock use p50 uncontended, highest grants/s otherwise), and
	// RatioToPeer this row over it (use p50 ratio uncontended: lower is
	// better; grants/s ratio otherwise: higher is better).
	Peer        string  `json:"peer,omitempty"`
	RatioToPeer float64 `json:"ratio_to_peer"`

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

// useNs is the p50 cost of one uncontended lock use.
func (r *Row) useNs() int64 { return r.P50 + r.ReleaseP50 }

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
	Rows       []*Row            `json:"rows"`
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
				r.RatioToFloor = float64(r.useNs()) / float64(r.FloorNs)
			}
			if r.BaselineRTT > 0 {
				r.RatioToRTT = float64(r.useNs()) / float64(r.BaselineRTT)
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
				r.IdealGrantsPerSec = Ideal(hold, work, time.Duration(r.BaselineRTT), int(toFloat(r.Params["clients"])))
				r.RatioToIdeal = r.GrantsPerSec / r.IdealGrantsPerSec
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
				r.RatioToPeer = float64(r.useNs()) / float64(best.useNs())
			}
		} else if best.GrantsPerSec > 0 {
			r.RatioToPeer = r.GrantsPerSec / best.GrantsPerSec
		}
	}
}

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

var csvHeader = []string{"backend", "family", "kind", "workload", "label", "clients", "procs",
	"p50_ns", "p99_ns", "p999_ns", "release_p50_ns", "release_p99_ns", "release_p999_ns",
	"grants", "grants_per_sec", "ideal_grants_per_sec", "ratio_to_ideal",
	"baseline_rtt_ns", "floor", "floor_ns", "ratio_to_floor", "ratio_to_rtt", "peer", "ratio_to_peer",
	"handoff_p50_ns", "handoff_p99_ns", "jain", "max_wait_ns", "violations", "fencing_violations",
	"failed_attempts_per_grant", "errors", "server_cmds_per_grant", "server_cpu_per_grant_ns", "skipped"}

// WriteCSV writes one line per row.
func (rep *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, r := range rep.Rows {
		cw.Write([]string{r.Backend, r.Family, r.Kind, r.Workload, r.Label, fmt.Sprint(r.Params["clients"]), strconv.Itoa(r.Procs),
			i(r.P50), i(r.P99), i(r.P999), i(r.ReleaseP50), i(r.ReleaseP99), i(r.ReleaseP999),
			u(r.Grants), f(r.GrantsPerSec), f(r.IdealGrantsPerSec), f(r.RatioToIdeal),
			i(r.BaselineRTT), r.Floor, i(r.FloorNs), f(r.RatioToFloor), f(r.RatioToRTT), r.Peer, f(r.RatioToPeer),
			i(r.HandoffP50), i(r.HandoffP99), f(r.Jain), i(r.MaxWait), u(r.Violations), u(r.FencingViolations),
			f(r.FailedPerGrant), u(r.Errors), f(r.ServerCmdsPerGrant), f(r.ServerCPUPerGrantNs), r.Skipped})
	}
	cw.Flush()
	return cw.Error()
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

// dur formats nanoseconds compactly: 850ns, 41.2µs, 3.1ms, 1.20s.
func dur(ns int64) string {
	d := time.Duration(ns)
	switch {
	case ns <= 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", ns)
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(ns)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func ratio(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("×%.2f", v)
}

func rate(v float64) string {
	if v <= 0 {
		return "-"
	}
	if v >= 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func perGrant(v float64, unit string) string {
	if v < 0 {
		return "-"
	}
	if unit == "ns" {
		return dur(int64(v))
	}
	return fmt.Sprintf("%.2f", v)
}

// WriteTable prints one table per workload configuration: targets as
// rows, with the ratio columns.
func (rep *Report) WriteTable(w io.Writer) {
	for _, label := range rep.Labels() {
		var rows []*Row
		for _, r := range rep.Rows {
			if r.Label == label {
				rows = append(rows, r)
			}
		}
		kind := rows[0].Workload
		fmt.Fprintf(w, "\n== %s  (%s)\n", label, paramLine(rows[0].Params))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		var head []string
		var cells func(r *Row) []string
		viol := func(r *Row) string {
			if r.Kind == KindFloor || r.Kind == KindRTT {
				return "-"
			}
			return fmt.Sprintf("%d/%d", r.Violations, r.FencingViolations)
		}
		switch kind {
		case Uncontended:
			head = []string{"acq p50", "acq p99", "acq p99.9", "rel p50", "use p50", "×floor", "×rtt", "×peer", "grants/s", "cmds/grant", "cpu/grant", "viol"}
			cells = func(r *Row) []string {
				return []string{dur(r.P50), dur(r.P99), dur(r.P999), dur(r.ReleaseP50), dur(r.useNs()),
					ratio(r.RatioToFloor), ratio(r.RatioToRTT), peerCell(r), rate(r.GrantsPerSec),
					perGrant(r.ServerCmdsPerGrant, ""), perGrant(r.ServerCPUPerGrantNs, "ns"), viol(r)}
			}
		case ManyKeys:
			head = []string{"grants/s", "rate×peer", "acq p50", "acq p99", "acq p99.9", "rel p50", "failed/grant", "cmds/grant", "cpu/grant", "viol"}
			cells = func(r *Row) []string {
				return []string{rate(r.GrantsPerSec), peerCell(r), dur(r.P50), dur(r.P99), dur(r.P999), dur(r.ReleaseP50),
					perGrant(r.FailedPerGrant, ""), perGrant(r.ServerCmdsPerGrant, ""), perGrant(r.ServerCPUPerGrantNs, "ns"), viol(r)}
			}
		case Handoff, Fairness:
			head = []string{"grants/s", "ideal/s", "×ideal", "rate×peer", "handoff p50", "handoff p99", "acq p99", "max wait", "jain", "failed/grant", "cmds/grant", "viol"}
			cells = func(r *Row) []string {
				return []string{rate(r.GrantsPerSec), rate(r.IdealGrantsPerSec), ratio(r.RatioToIdeal), peerCell(r),
					dur(r.HandoffP50), dur(r.HandoffP99), dur(r.P99), dur(r.MaxWait), fmt.Sprintf("%.3f", r.Jain),
					perGrant(r.FailedPerGrant, ""), perGrant(r.ServerCmdsPerGrant, ""), viol(r)}
			}
		case OpenLoop:
			head = []string{"offered/s", "grants/s", "lat p50", "lat p99", "lat p99.9", "max", "rel p50", "viol"}
			cells = func(r *Row) []string {
				return []string{rate(toFloat(r.Params["rate_per_sec"])), rate(r.GrantsPerSec), dur(r.P50), dur(r.P99), dur(r.P999),
					dur(r.MaxWait), dur(r.ReleaseP50), viol(r)}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", "target", strings.Join(head, "\t"))
		// Skipped rows go after the aligned block: a line with fewer cells
		// would end tabwriter's column block in the middle of the table.
		var skipped []*Row
		for _, r := range rows {
			name := r.Backend
			if r.Skipped != "" {
				skipped = append(skipped, r)
				continue
			}
			if r.Errors > 0 {
				name += fmt.Sprintf(" (%d errors)", r.Errors)
			}
			fmt.Fprintf(tw, "%s\t%s\t\n", name, strings.Join(cells(r), "\t"))
		}
		tw.Flush()
		for _, r := range skipped {
			fmt.Fprintf(w, "  %s skipped: %s\n", r.Backend, r.Skipped)
		}
	}
}

func peerCell(r *Row) string {
	if r.Peer == "" || r.Kind == KindPeer && r.RatioToPeer == 0 {
		return "-"
	}
	return ratio(r.RatioToPeer)
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

func paramLine(p map[string]any) string {
	keys := []string{"clients", "names", "hold", "work", "duration", "load"}
	var parts []string
	for _, k := range keys {
		if v, ok := p[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}
