package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/stats"
)

// Verdict is what a run concludes: the answer a team reads first, at the
// top of index.html and of the terminal output. Decide builds it from the
// rows of a finalized report.
type Verdict struct {
	// Workloads: per workload configuration, who wins.
	Workloads []WorkloadVerdict `json:"workloads"`
	// Safety puts safety beside speed for every dlock backend/strategy.
	Safety []SafetyRow `json:"safety"`
	// Claims answers the seed articles' three claims.
	Claims []Claim `json:"claims"`
	// Paragraph is one paragraph a team could paste into a design document.
	Paragraph string `json:"paragraph"`
	// Caveats: what the figures do not carry (machine-specific absolute
	// figures, wide intervals, the machine's load during the run).
	Caveats []string `json:"caveats,omitempty"`
}

// WorkloadVerdict names the winner of one workload configuration.
type WorkloadVerdict struct {
	Label string `json:"label"`
	// Metric is what decides ("lock use p50, lower is better",
	// "grants/s, higher is better").
	Metric string `json:"metric"`
	// Winners has one target, or several when their intervals overlap
	// (Tie): every target whose interval overlaps the best one's.
	// RunnersUp are the targets that overlap a winner without
	// overlapping the best: not told apart from a winner, though the best
	// is ahead of them. The in-process memory driver never wins.
	Winners   []string `json:"winners"`
	Tie       bool     `json:"tie"`
	RunnersUp []string `json:"runners_up,omitempty"`
	// Text says it in a sentence, with the figures.
	Text string `json:"text"`
}

// SafetyRow is one dlock backend/strategy: what it guarantees and what it
// costs. Unknown or not applicable facts are "". The facts come from the
// driver's Capabilities (Row.Caps).
type SafetyRow struct {
	Target string `json:"target"`
	// Fencing: "yes" when tokens strictly increase across holders.
	Fencing string `json:"fencing_token"`
	// SurvivesRestart: "yes" when tokens keep increasing across a server
	// restart.
	SurvivesRestart string `json:"survives_restart"`
	// Fair: "yes" when waiters are granted in arrival order.
	Fair string `json:"fair"`
	// Waiters is how waiters learn the lock is free: "queue" (the server
	// grants it to the next in line), "notify" (woken by a notification,
	// then they try again) or "polling".
	Waiters string `json:"waiters"`
	// FreedAfterCrash is how soon a crashed holder's lock is free: "at
	// once" (its connection closes), "TTL" (when the lease runs out) or
	// "session (4s)" (when its session expires, after that timeout).
	FreedAfterCrash string `json:"freed_after_crash"`
	// LostLease is when Lease.Done tells the holder it lost the lock:
	// "TTL" (at a local deadline ahead of the server's expiry),
	// "TTL+conn" (also as soon as its connection breaks) or "session"
	// (when its session is lost).
	LostLease string `json:"lost_lease_signal"`
	// FaultViolations is the violations the fault suite measured, nil
	// when its report is not available.
	FaultViolations *int `json:"fault_violations"`
	// Speed: the uncontended lock use and the handoff rate, with units.
	UseNs         float64 `json:"use_ns"`
	HandoffPerSec float64 `json:"handoff_grants_per_sec"`
}

// Claim is one of the seed articles' claims and what this run says of it.
type Claim struct {
	Claim string `json:"claim"`
	// Answer is "confirmed", "refuted", "depends on strategy" or "not
	// measured".
	Answer string `json:"answer"`
	// Figures are the figures that decide it.
	Figures string `json:"figures"`
}

// Claim answers.
const (
	Confirmed   = "confirmed"
	Refuted     = "refuted"
	Depends     = "depends on strategy"
	NotMeasured = "not measured"
)

// SafetyLegend explains the safety table's columns and short values, for
// every page that prints the table.
const SafetyLegend = "fence: a fencing token; restart: tokens keep increasing across a server restart; " +
	"waiters: queue (the server grants the next), notify (woken, then retry), polling; " +
	"crash freed: when a dead holder's lock is free (at once: its connection closes; TTL: when its lease runs out; " +
	"session: when its session expires); " +
	"Done on: when Lease.Done tells a holder its lease is lost (TTL: a local deadline before the TTL ends; " +
	"+conn: also when its connection breaks; session: when its session is lost); " +
	"faults: violations in the fault suite (dlockchaos), \"not run\" without its report"

// SafetyHandoff is the workload configuration whose rate the safety table
// puts beside each strategy: a hot lock with 8 waiters and a 1 ms hold.
const SafetyHandoff = "handoff w=8 hold=1ms"

// OpenLoopMargin is the relative difference under which two figures
// without an interval are a tie: figures of a single round (and the
// merged open-loop p99 of a report made before the rounds' p99s had an
// interval).
const OpenLoopMargin = 0.10

// memoryNote is said once: why the memory driver never wins.
const memoryNote = "memory is the in-process reference driver (the portable layer alone, no server): " +
	"it is shown for scale but never wins, as it is not a distributed lock"

// Decide builds the verdict of a finalized report, without the fault
// suite's figures (see DecideFaults).
func Decide(rep *Report) *Verdict { return DecideFaults(rep, nil) }

// DecideFaults builds the verdict of a finalized report; faults is the
// fault suite's violations per target name (LoadFaultReport), nil when
// its report is not available.
func DecideFaults(rep *Report, faults map[string]int) *Verdict {
	v := &Verdict{}
	memory := false
	for _, label := range rep.Labels() {
		wv, hasMem := decideWorkload(rep, label)
		memory = memory || hasMem
		if wv != nil {
			v.Workloads = append(v.Workloads, *wv)
		}
	}
	v.Safety = safetyRows(rep, faults)
	v.Claims = claims(rep, v.Safety)
	v.Paragraph = paragraph(rep, v.Safety)
	v.Caveats = caveats(rep, memory)
	return v
}

// entry is one row's figure on a metric: its median, its interval (nil
// when the row has no interval of at least two rounds), which way is
// better.
type entry struct {
	name  string
	v     float64
	iv    *stats.Interval
	lower bool // lower is better
	unit  string
}

// indistinct reports whether two figures cannot be told apart: their
// intervals overlap, or, without intervals, they lie within
// OpenLoopMargin of each other.
func (e entry) indistinct(o entry) bool {
	if e.iv != nil && o.iv != nil {
		return e.iv.Overlaps(o.iv)
	}
	lo, hi := min(e.v, o.v), max(e.v, o.v)
	return lo > 0 && (hi-lo)/lo <= OpenLoopMargin
}

// better reports whether e is ahead of o and told apart from it.
func (e entry) better(o entry) bool {
	if e.indistinct(o) {
		return false
	}
	if e.lower {
		return e.v < o.v
	}
	return e.v > o.v
}

// String is the figure with its interval: "182µs [170, 195]".
func (e entry) String() string {
	f := fmtRate
	if e.unit == "ns" {
		f = fmtNs
	}
	s := f(e.v, true)
	if e.iv != nil {
		s += fmt.Sprintf(" [%s, %s]", f(e.iv.Lo, false), f(e.iv.Hi, false))
	}
	return s
}

// fmtNs prints nanoseconds with three significant digits, with its unit
// or (for an interval's bounds) without.
func fmtNs(ns float64, unit bool) string {
	div, u := 1.0, "ns"
	switch {
	case ns >= 1e9:
		div, u = 1e9, "s"
	case ns >= 1e6:
		div, u = 1e6, "ms"
	case ns >= 1e3:
		div, u = 1e3, "µs"
	}
	s := sig3(ns / div)
	if unit {
		s += " " + u
	}
	return s
}

// fmtRate prints a rate in grants per second.
func fmtRate(r float64, unit bool) string {
	s := sig3(r)
	if r >= 1000 {
		s = fmt.Sprintf("%.0f", r)
	}
	if unit {
		s += "/s"
	}
	return s
}

// sig3 prints v with three significant digits and no exponent.
func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// settled returns iv when it is an interval of at least two rounds, nil
// otherwise (a figure measured once has no interval to compare).
func settled(iv *stats.Interval) *stats.Interval {
	if iv == nil || iv.Rounds < 2 {
		return nil
	}
	return iv
}

// metricOf returns what decides a workload kind and each row's figure on it.
func metricOf(kind string) (desc string, fig func(*Row) entry) {
	switch kind {
	case Uncontended:
		return "lock use = acquire p50 + release p50, lower is better", useEntry
	case OpenLoop:
		return "acquire p99 from the intended start, median of the rounds' p99s, lower is better", p99Entry
	}
	return "grants/s, higher is better", rateEntry
}

// p99Entry is an open-loop row's figure: the median of its rounds' p99s
// with their interval (a row aggregated before RoundP99 existed has only
// the merged p99, and OpenLoopMargin decides its ties).
func p99Entry(r *Row) entry {
	if iv := settled(r.RoundP99); iv != nil {
		return entry{name: r.Backend, v: iv.Median, iv: iv, lower: true, unit: "ns"}
	}
	return entry{name: r.Backend, v: float64(r.P99), lower: true, unit: "ns"}
}

func useEntry(r *Row) entry {
	return entry{name: r.Backend, v: float64(r.useNs()), iv: settled(r.Use), lower: true, unit: "ns"}
}

func rateEntry(r *Row) entry {
	v := r.GrantsPerSec
	if r.Rate != nil {
		v = r.Rate.Median
	}
	return entry{name: r.Backend, v: v, iv: settled(r.Rate), unit: "/s"}
}

// contender reports whether a row may win: a dlock row, measured, without
// violations, not the in-process memory driver.
func contender(r *Row) bool {
	// The scale curves compare each Locker with itself and its floor as
	// its work grows, not the backends with each other.
	return r.Kind == KindDlock && r.Skipped == "" && r.Violations == 0 && r.FencingViolations == 0 && r.Family != "memory" &&
		r.Workload != Scale
}

// rank sorts entries best first and splits them: winners (the best and
// every entry that cannot be told apart from it), runners-up (the others
// that cannot be told apart from some winner) and the rest.
func rank(es []entry) (winners, runnersUp, rest []entry) {
	slices.SortStableFunc(es, func(a, b entry) int {
		if a.lower {
			return cmp.Compare(a.v, b.v)
		}
		return cmp.Compare(b.v, a.v)
	})
	if len(es) == 0 {
		return nil, nil, nil
	}
	winners = []entry{es[0]}
	for _, e := range es[1:] {
		if e.indistinct(es[0]) {
			winners = append(winners, e)
		}
	}
	for _, e := range es[1:] {
		if slices.ContainsFunc(winners, func(w entry) bool { return w.name == e.name }) {
			continue
		}
		if slices.ContainsFunc(winners, e.indistinct) {
			runnersUp = append(runnersUp, e)
		} else {
			rest = append(rest, e)
		}
	}
	return winners, runnersUp, rest
}

func names(es []entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.name
	}
	return out
}

// figures lists entries with their figures: "redis 182 µs [170, 195], ...".
func figures(es []entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.name + " " + e.String()
	}
	return strings.Join(parts, ", ")
}

// decideWorkload calls the winner of one workload configuration; it
// returns nil when no row may win, and whether a memory row was shown.
func decideWorkload(rep *Report, label string) (*WorkloadVerdict, bool) {
	var es, mem []entry
	var excluded []string
	kind := ""
	var fig func(*Row) entry
	var desc string
	for _, r := range rep.Rows {
		if r.Label != label || r.Kind != KindDlock || r.Skipped != "" || r.Workload == Scale {
			continue
		}
		if fig == nil {
			kind = r.Workload
			desc, fig = metricOf(kind)
		}
		e := fig(r)
		switch {
		case r.Violations+r.FencingViolations > 0:
			excluded = append(excluded, fmt.Sprintf("%s (%d violations)", r.Backend, r.Violations+r.FencingViolations))
		case r.Family == "memory":
			mem = append(mem, e)
		case e.v > 0:
			es = append(es, e)
		}
	}
	if len(es) == 0 {
		return nil, len(mem) > 0
	}
	if slices.ContainsFunc(es, func(e entry) bool { return e.iv == nil }) {
		desc += fmt.Sprintf("; figures of one round have no interval: within %.0f %% is a tie", OpenLoopMargin*100)
	}
	winners, runnersUp, rest := rank(es)
	wv := &WorkloadVerdict{Label: label, Metric: desc, Winners: names(winners), Tie: len(winners) > 1, RunnersUp: names(runnersUp)}
	var b strings.Builder
	if wv.Tie {
		fmt.Fprintf(&b, "%s tie: %s", joinAnd(wv.Winners), figures(winners))
	} else {
		fmt.Fprintf(&b, "%s wins at %s", winners[0].name, winners[0])
		if len(rest) > 0 {
			fmt.Fprintf(&b, " (%s of the next)", ahead(winners[0], rest[0]))
		}
	}
	if len(runnersUp) > 0 {
		fmt.Fprintf(&b, "; within a winner's interval: %s", figures(runnersUp))
	}
	if len(rest) > 0 {
		const shown = 3
		if len(rest) <= shown+1 {
			fmt.Fprintf(&b, "; then %s", figures(rest))
		} else {
			fmt.Fprintf(&b, "; then %s … last %s", figures(rest[:shown]), figures(rest[len(rest)-1:]))
		}
	}
	if len(mem) > 0 {
		fmt.Fprintf(&b, "; memory (in-process) %s", mem[0])
	}
	if len(excluded) > 0 {
		fmt.Fprintf(&b, "; excluded: %s", strings.Join(excluded, ", "))
	}
	b.WriteString(".")
	wv.Text = b.String()
	return wv, len(mem) > 0
}

// ahead says by how much a leads b: "×1.35".
func ahead(a, b entry) string {
	if a.v <= 0 || b.v <= 0 {
		return "ahead"
	}
	r := b.v / a.v
	if !a.lower {
		r = a.v / b.v
	}
	return fmt.Sprintf("×%.2f ahead", r)
}

// joinAnd joins names: "a", "a and b", "a, b and c".
func joinAnd(ss []string) string {
	if len(ss) <= 1 {
		return strings.Join(ss, "")
	}
	return strings.Join(ss[:len(ss)-1], ", ") + " and " + ss[len(ss)-1]
}

// yes prints a fact.
func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// waiters says how a backend's waiters learn the lock is free.
func waiters(w driver.WaitKind) string {
	switch w {
	case driver.WaitQueue:
		return "queue"
	case driver.WaitNotify:
		return "notify"
	case driver.WaitPoll:
		return "polling"
	}
	return string(w)
}

// freedAfterCrash says how soon a dead holder's lock is free: "at once"
// (its connection closes), "TTL" (when its lease runs out), "session
// (4s)" (when its session expires) or the driver's bound.
func freedAfterCrash(c *driver.Capabilities) string {
	switch {
	case c.ReleaseOnCrash == 0:
		return "at once"
	case c.ReleaseOnCrash < 0:
		return "TTL"
	case c.SessionBound:
		return fmt.Sprintf("session (%v)", c.ReleaseOnCrash)
	}
	return c.ReleaseOnCrash.String()
}

// lostLease says when Lease.Done tells a holder its lease is gone: at the
// portable layer's local deadline, before the server's TTL ends, on every
// TTL-bound backend ("TTL"), and also as soon as the driver sees its
// connection break (the connection-bound SQL strategies: "TTL+conn"), or
// when its session is lost (ZooKeeper: "session").
func lostLease(c *driver.Capabilities) string {
	switch {
	case c.SessionBound:
		return "session"
	case c.ReleaseOnCrash == 0:
		return "TTL+conn"
	}
	return "TTL"
}

// safetyRows puts each dlock strategy's guarantees beside its speed.
func safetyRows(rep *Report, faults map[string]int) []SafetyRow {
	var out []SafetyRow
	idx := map[string]int{}
	for _, r := range rep.Rows {
		if r.Kind != KindDlock || r.Skipped != "" {
			continue
		}
		i, ok := idx[r.Backend]
		if !ok {
			i = len(out)
			idx[r.Backend] = i
			out = append(out, SafetyRow{Target: r.Backend})
			if n, ok := faults[faultKey(r.Backend)]; ok {
				out[i].FaultViolations = &n
			}
		}
		s := &out[i]
		if r.Caps != nil && s.Fencing == "" {
			c := r.Caps
			s.Fencing, s.SurvivesRestart, s.Fair = yes(c.Fencing), yes(c.TokensSurviveRestart), yes(c.Fair)
			if noFsync(s.Target) {
				// The driver's promise assumes a server that syncs its
				// writes; this one may lose them, tokens included.
				s.SurvivesRestart = "no (no fsync)"
			}
			s.Waiters, s.FreedAfterCrash, s.LostLease = waiters(c.Wait), freedAfterCrash(c), lostLease(c)
		}
		switch {
		case r.Workload == Uncontended && !r.IsFresh():
			s.UseNs = float64(r.useNs())
		case r.Label == SafetyHandoff:
			s.HandoffPerSec = rateEntry(r).v
		}
	}
	// Memory last: it is the reference, not a candidate.
	slices.SortStableFunc(out, func(a, b SafetyRow) int {
		return cmp.Compare(boolInt(a.Target == "memory"), boolInt(b.Target == "memory"))
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// faultKey is the name under which the fault suite reports a target: the
// fsync variant of ZooKeeper is the same strategy as the default one.
// noFsync reports whether target's server runs without syncing its writes
// (etcd-nofsync: --unsafe-no-fsync), which a crash of every member may
// lose, tokens included.
func noFsync(target string) bool { return strings.HasSuffix(target, "-nofsync") }

func faultKey(target string) string {
	return strings.TrimSuffix(strings.TrimSuffix(target, "-fsync"), "-nofsync")
}

// LoadFaultReport reads the fault suite's faults.json (faults/cmd/dlockchaos)
// and returns the violations it measured per target name, in the names
// dlockbench uses ("redis", "redis+cluster", "postgres/advisory"): the
// fenced-mutex checker's violations plus the broken promises the faults
// observed themselves. A ZooKeeper ensemble's runs count for "zookeeper"
// (the same strategy), an etcd cluster's for "etcd". Runs the checker
// could not check count nothing.
func LoadFaultReport(path string) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: fault report: %w", err)
	}
	var rep struct {
		Results []struct {
			Backend          string   `json:"backend"`
			FencedViolations *int     `json:"fenced_violations"`
			Violations       []string `json:"violations"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("bench: fault report %s: %w", path, err)
	}
	if rep.Results == nil {
		return nil, fmt.Errorf("bench: fault report %s: no results (is it a faults.json?)", path)
	}
	out := map[string]int{}
	for _, r := range rep.Results {
		name := r.Backend
		switch name {
		case "redis-cluster":
			name = "redis+cluster"
		case "zookeeper-ensemble":
			name = "zookeeper"
		case "etcd-cluster":
			name = "etcd"
		}
		if r.FencedViolations == nil || *r.FencedViolations < 0 {
			if len(r.Violations) == 0 {
				continue
			}
		} else {
			out[name] += *r.FencedViolations
		}
		out[name] += len(r.Violations)
	}
	return out, nil
}

// caveats lists what the figures do not carry.
func caveats(rep *Report, memory bool) []string {
	out := []string{"absolute figures are specific to this machine and its load; the ratios between backends are what carry over"}
	if memory {
		out = append(out, memoryNote)
	}
	if rep.Quick {
		out = append(out, "a -quick run: short measurements, fewer configurations; run `make bench` for the figures to quote")
	}
	var few *stats.Interval
	var wide []string
	for _, r := range rep.Rows {
		if !contender(r) {
			continue
		}
		iv := r.Rate
		if r.Workload == Uncontended {
			iv = r.Use
		}
		if r.Workload == OpenLoop {
			iv = r.RoundP99 // the verdict decides open loops on the p99
		}
		if iv = settled(iv); iv == nil {
			continue
		}
		if few == nil && iv.Confidence < Confidence {
			few = iv
		}
		if iv.Wide(WideInterval) {
			wide = append(wide, fmt.Sprintf("%s on %s ±%.0f %%", r.Backend, r.Label, iv.HalfWidth()*100))
		}
	}
	if few != nil {
		out = append(out, fmt.Sprintf("with %d rounds an interval covers %.1f %% (not %.0f %%)", few.Rounds, few.Confidence*100, Confidence*100))
	}
	if len(wide) > 0 {
		const listed = 8
		list := strings.Join(wide[:min(listed, len(wide))], "; ")
		if len(wide) > listed {
			list += fmt.Sprintf("; and %d more (see report.json)", len(wide)-listed)
		}
		out = append(out, fmt.Sprintf("%d figures the verdict compares are unsettled (interval wider than ±%.0f %%): %s",
			len(wide), WideInterval*100, list))
	}
	if l := rep.Load; l != nil && l.OtherPct > 10 {
		out = append(out, fmt.Sprintf("the machine was busy: other processes used %.0f %% of the CPU during the run (load average %.1f → %.1f)",
			l.OtherPct, l.Avg1Start, l.Avg1End))
	}
	if c := rep.Settle.caveat(); c != "" {
		out = append(out, c)
	}
	if len(rep.Skipped) > 0 {
		out = append(out, "not measured: "+strings.Join(rep.Skipped, "; "))
	}
	return out
}

// textWidth is the terminal width WriteText fits its prose to.
const textWidth = 100

// WriteText prints the verdict for the terminal, before the tables.
func (v *Verdict) WriteText(w io.Writer) {
	fmt.Fprintln(w, "== verdict")
	if len(v.Workloads) == 0 {
		fmt.Fprintln(w, "  no distributed backend was measured: no winner to call")
	}
	for _, wv := range v.Workloads {
		wrap(w, fmt.Sprintf("%s (%s): %s", wv.Label, wv.Metric, wv.Text), "  ", "    ")
	}
	if len(v.Safety) > 0 {
		fmt.Fprintf(w, "\n== safety beside speed (use: uncontended acquire + release p50; handoff: grants/s, %s)\n",
			strings.TrimPrefix(SafetyHandoff, "handoff "))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "target\tfence\trestart\tfair\twaiters\tcrash freed\tDone on\tfaults\tuse\thandoff")
		for _, s := range v.Safety {
			fv := "not run"
			if s.FaultViolations != nil {
				fv = fmt.Sprint(*s.FaultViolations)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Target, orQ(s.Fencing), orQ(s.SurvivesRestart),
				orQ(s.Fair), orQ(s.Waiters), orQ(s.FreedAfterCrash), orQ(s.LostLease), fv, dur(int64(s.UseNs)), rate(s.HandoffPerSec))
		}
		tw.Flush()
		wrap(w, SafetyLegend, "", "  ")
	}
	if len(v.Claims) > 0 {
		fmt.Fprintln(w, "\n== the seed claims")
		for _, c := range v.Claims {
			wrap(w, fmt.Sprintf("%s: %s. %s", c.Claim, strings.ToUpper(c.Answer), c.Figures), "  ", "    ")
		}
	}
	if v.Paragraph != "" {
		fmt.Fprintln(w, "\n== in a design document")
		wrap(w, v.Paragraph, "", "")
	}
	if len(v.Caveats) > 0 {
		fmt.Fprintln(w, "\n== caveats")
		for _, c := range v.Caveats {
			wrap(w, c, "  - ", "    ")
		}
	}
}

func orQ(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// wrap prints text in lines of at most textWidth columns (a longer word
// gets its own line), the first line after first, the others after rest.
func wrap(w io.Writer, text, first, rest string) {
	line, n := first, len([]rune(first))
	empty := true
	for _, word := range strings.Fields(text) {
		wl := len([]rune(word))
		if !empty && n+1+wl > textWidth {
			fmt.Fprintln(w, line)
			line, n, empty = rest, len([]rune(rest)), true
		}
		if !empty {
			line += " "
			n++
		}
		line += word
		n += wl
		empty = false
	}
	fmt.Fprintln(w, line)
}
