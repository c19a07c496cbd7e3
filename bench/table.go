package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/internal/stats"
)

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
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// durOf is dur for a figure kept as a float, as intervals keep theirs.
func durOf(ns float64) string { return dur(int64(ns)) }

// optional formats a figure that may not apply: "-" for nil.
func optional[T any](p *T, format func(T) string) string {
	if p == nil {
		return "-"
	}
	return format(*p)
}

func twoDecimals(v float64) string { return fmt.Sprintf("%.2f", v) }

// legend collects what the tables printed, to explain the marks once
// under them.
type legend struct {
	intervals, wide, single bool
	// The fewest and most rounds behind an interval, and the lowest
	// coverage of one.
	minRounds, maxRounds int
	confidence           float64
}

// interval formats a figure with its interval: "182.3µs ±4%", "×1.83
// ±3%"; "?" follows an interval wider than ±WideInterval, a figure of
// one round has no ±, and "-" stands for a figure that does not apply.
// The ± is the interval's larger distance from the median.
func (l *legend) interval(iv *stats.Interval, format func(float64) string) string {
	if iv == nil {
		return "-"
	}
	s := format(iv.Median)
	if iv.Rounds <= 1 {
		l.single = true
		return s
	}
	if l.confidence == 0 || iv.Confidence < l.confidence {
		l.confidence = iv.Confidence
	}
	if !l.intervals || iv.Rounds < l.minRounds {
		l.minRounds = iv.Rounds
	}
	l.intervals, l.maxRounds = true, max(l.maxRounds, iv.Rounds)
	switch hw := iv.HalfWidth() * 100; {
	case hw >= 999:
		s += " ±>999%"
	case hw < 1:
		s += fmt.Sprintf(" ±%.1f%%", hw)
	default:
		s += fmt.Sprintf(" ±%.0f%%", hw)
	}
	if unsettled(iv) {
		l.wide = true
		s += "?"
	}
	return s
}

// write explains the marks the tables used.
func (l *legend) write(w io.Writer) {
	if !l.intervals && !l.single {
		return
	}
	fmt.Fprintln(w)
	if l.intervals {
		rounds := fmt.Sprintf("%d rounds", l.minRounds)
		if l.maxRounds > l.minRounds {
			rounds = fmt.Sprintf("a table's rounds (%d to %d)", l.minRounds, l.maxRounds)
		}
		fmt.Fprintf(w, "±: the %.0f %% confidence interval of the median of %s, from order statistics\n"+
			"   as in benchstat, as its larger distance from the median", Confidence*100, rounds)
		if l.confidence < Confidence {
			fmt.Fprintf(w, ";\n   with few rounds it is [min, max] of the rounds, which covers %.0f %%", l.confidence*100)
		}
		fmt.Fprintln(w, ".")
	}
	if l.wide {
		fmt.Fprintf(w, "?: the interval is wider than ±%.0f %%: the figure is not settled; do not rank by it.\n", WideInterval*100)
	}
	if l.single {
		fmt.Fprintln(w, "A figure without ± comes from one round: it has no interval.")
	}
	fmt.Fprintln(w, "-: does not apply, or nothing to compare with.")
}

// WriteTable prints one table per workload configuration, targets as
// rows, the headline figures with their intervals, then what the marks
// mean.
func (rep *Report) WriteTable(w io.Writer) {
	var l legend
	ratioIv := func(iv *stats.Interval) string { return l.interval(iv, ratio) }
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
		var cells func(r *Row, f applicable) []string
		switch kind {
		case Uncontended:
			head = []string{"acq p50", "acq p99", "rel p50", "use p50", "×floor", "×rtt", "×peer", "cmds/grant", "cpu/grant", "viol"}
			cells = func(r *Row, f applicable) []string {
				return []string{optional(f.P50, dur), optional(f.P99, dur), optional(f.ReleaseP50, dur),
					l.interval(f.Use, durOf), ratioIv(r.ToFloor), ratioIv(r.ToRTT), ratioIv(r.ToPeer),
					optional(f.ServerCmdsPerGrant, twoDecimals), optional(f.ServerCPUPerGrantNs, durOf), viol(f)}
			}
		case ManyKeys:
			head = []string{"grants/s", "rate×peer", "acq p50", "acq p99", "acq p99.9", "rel p50", "failed/grant", "cmds/grant", "cpu/grant", "viol"}
			cells = func(r *Row, f applicable) []string {
				return []string{l.interval(f.Rate, rate), ratioIv(r.ToPeer), optional(f.P50, dur), optional(f.P99, dur),
					optional(f.P999, dur), optional(f.ReleaseP50, dur), optional(f.FailedPerGrant, twoDecimals),
					optional(f.ServerCmdsPerGrant, twoDecimals), optional(f.ServerCPUPerGrantNs, durOf), viol(f)}
			}
		case Handoff, Fairness:
			// The ideal's own interval is left out: ×ideal, paired per
			// round, carries it.
			head = []string{"grants/s", "ideal/s", "×ideal", "rate×peer", "hold", "handoff p50", "handoff p99", "max wait", "jain", "failed/grant", "viol"}
			cells = func(r *Row, f applicable) []string {
				return []string{l.interval(f.Rate, rate), rate(Med(r.Ideal)), ratioIv(r.ToIdeal), ratioIv(r.ToPeer),
					optional(f.HoldNs, dur), optional(f.HandoffP50, dur), optional(f.HandoffP99, dur), optional(f.MaxWait, dur),
					optional(f.Jain, func(v float64) string { return fmt.Sprintf("%.3f", v) }),
					optional(f.FailedPerGrant, twoDecimals), viol(f)}
			}
		case Semaphore:
			head = []string{"grants/s", "ideal/s", "×ideal", "rate×floor", "hold", "acq p50", "acq p99", "acq p99.9", "max wait", "rel p50", "jain", "failed/grant", "viol"}
			cells = func(r *Row, f applicable) []string {
				return []string{l.interval(f.Rate, rate), rate(Med(r.Ideal)), ratioIv(r.ToIdeal), ratioIv(r.RateToFloor),
					optional(f.HoldNs, dur), optional(f.P50, dur), optional(f.P99, dur), optional(f.P999, dur), optional(f.MaxWait, dur),
					optional(f.ReleaseP50, dur), optional(f.Jain, func(v float64) string { return fmt.Sprintf("%.3f", v) }),
					optional(f.FailedPerGrant, twoDecimals), viol(f)}
			}
		case Scale:
			head = []string{"grants/s", "floor/s", "rate×floor", "core %", "core % at 30s TTL", "failed/grant", "cmds/grant", "reqs/grant", "viol"}
			pct := func(v float64) string { return fmt.Sprintf("%.2f", v) }
			cells = func(r *Row, f applicable) []string {
				return []string{l.interval(f.Rate, rate), l.interval(r.FloorRate, rate), ratioIv(r.RateToFloor),
					optional(r.CorePct, pct), optional(r.CorePctDefaultTTL, pct),
					optional(f.FailedPerGrant, twoDecimals), optional(f.ServerCmdsPerGrant, twoDecimals),
					optional(f.ServerReqsPerGrant, twoDecimals), viol(f)}
			}
		case OpenLoop:
			head = []string{"offered/s", "grants/s", "lat p50", "lat p99", "round p99", "lat p99.9", "max", "rel p50", "viol"}
			cells = func(r *Row, f applicable) []string {
				return []string{rate(toFloat(r.Params["rate_per_sec"])), l.interval(f.Rate, rate), optional(f.P50, dur),
					optional(f.P99, dur), l.interval(r.RoundP99, durOf), optional(f.P999, dur), optional(f.MaxWait, dur), optional(f.ReleaseP50, dur), viol(f)}
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
			fmt.Fprintf(tw, "%s\t%s\t\n", name, strings.Join(cells(r, applicableOf(r)), "\t"))
		}
		tw.Flush()
		for _, r := range skipped {
			fmt.Fprintf(w, "  %s skipped: %s\n", r.Backend, r.Skipped)
		}
	}
	l.write(w)
}

// viol is "exclusion/fencing" violations; "-" where the checker does not
// see the row's critical sections, or does not check its tokens.
func viol(f applicable) string {
	if f.Violations == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%s", *f.Violations, optional(f.FencingViolations, func(v uint64) string { return fmt.Sprint(v) }))
}

func paramLine(p map[string]any) string {
	keys := []string{"permits", "clients", "names", "hold", "work", "duration", "load", "rounds", "lease_ttl", "window"}
	var parts []string
	for _, k := range keys {
		if v, ok := p[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}
