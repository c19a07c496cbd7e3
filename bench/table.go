package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
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
					ratio(Med(r.ToFloor)), ratio(Med(r.ToRTT)), peerCell(r), rate(r.GrantsPerSec),
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
				return []string{rate(r.GrantsPerSec), rate(Med(r.Ideal)), ratio(Med(r.ToIdeal)), peerCell(r),
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
	if r.Peer == "" || r.Kind == KindPeer && r.ToPeer == nil {
		return "-"
	}
	return ratio(Med(r.ToPeer))
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
