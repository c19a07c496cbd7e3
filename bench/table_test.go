package bench

import (
	"regexp"
	"strings"
	"testing"
)

// tableLine returns the line of the table labelled label whose target is
// name, split into its cells (two or more spaces apart).
func tableLine(t *testing.T, out, label, name string) []string {
	t.Helper()
	_, section, ok := strings.Cut(out, "== "+label+" ")
	if !ok {
		t.Fatalf("no table %q in:\n%s", label, out)
	}
	section, _, _ = strings.Cut(section, "\n== ")
	sep := regexp.MustCompile(`\s{2,}`)
	for _, line := range strings.Split(section, "\n") {
		cells := sep.Split(strings.TrimSpace(line), -1)
		if cells[0] == name {
			return cells
		}
	}
	t.Fatalf("table %q has no line for %q:\n%s", label, name, section)
	return nil
}

// column returns the cell under head in the table labelled label.
func column(t *testing.T, out, label, name, head string) string {
	t.Helper()
	heads := tableLine(t, out, label, "target")
	// Headers hold single spaces ("acq p50"): split them like the cells.
	cells := tableLine(t, out, label, name)
	for i, h := range heads {
		if h == head && i < len(cells) {
			return cells[i]
		}
	}
	t.Fatalf("table %q has no column %q (%v) for %q (%v)", label, head, heads, name, cells)
	return ""
}

func TestTableIntervals(t *testing.T) {
	rep := syntheticReport()
	var b strings.Builder
	rep.WriteTable(&b)
	out := b.String()
	const unc, hand = "uncontended", "handoff w=8 hold=1ms"
	for _, c := range []struct{ label, name, head, want, why string }{
		{unc, "redis", "use p50", "100.0µs ±3%", "a settled figure with its interval"},
		{unc, "redis", "×floor", "×1.83 ±2%", "a ratio with its interval"},
		{unc, "zookeeper", "×floor", "×1.75 ±20%?", "an interval wider than ±10 % is marked"},
		{unc, "zookeeper", "×peer", "-", "no peer on the server"},
		{unc, "zookeeper", "cmds/grant", "-", "ZooKeeper does not count commands"},
		{unc, "floor redis", "viol", "-", "a floor runs alone: nothing to check"},
		{unc, "rtt redis", "rel p50", "-", "a round trip has nothing to release"},
		{unc, "redis", "viol", "0/0", "a fenced dlock row: both counts"},
		{hand, "redsync", "viol", "0/-", "a peer's tokens are not checked"},
		{hand, "redis", "hold", "1.08ms", "the measured hold"},
		{hand, "redis", "ideal/s", "850", "the ideal"},
		{hand, "redis", "×ideal", "×0.82 ±1%", "the ratio to the ideal"},
	} {
		if got := column(t, out, c.label, c.name, c.head); got != c.want {
			t.Errorf("%s / %s / %s = %q, want %q: %s", c.label, c.name, c.head, got, c.want, c.why)
		}
	}
	// Two rows whose intervals overlap both show them, so a reader sees
	// the tie rather than a winner.
	for _, name := range []string{"redis", "redsync"} {
		if got := column(t, out, hand, name, "grants/s"); !strings.Contains(got, " ±") {
			t.Errorf("handoff %s grants/s = %q, want its interval", name, got)
		}
	}
	// Skipped rows follow the aligned block; the marks are explained once,
	// at the end.
	if !strings.Contains(out, "  postgres/advisory skipped: postgres: server did not start\n") {
		t.Errorf("the skipped row is missing:\n%s", out)
	}
	for _, want := range []string{"±: the 95 % confidence interval of the median of 7 rounds, from order statistics", "?: the interval is wider than ±10 %", "-: does not apply"} {
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("the legend %q appears %d times, want once:\n%s", want, n, out)
		}
	}
	if i, j := strings.LastIndex(out, "== "), strings.Index(out, "±: the"); j < i {
		t.Errorf("the legend comes before the last table:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 130 {
			t.Errorf("a line of %d columns: %q", n, line)
		}
	}
}

func TestTableOneRound(t *testing.T) {
	rep := syntheticReport()
	r := rep.Rows[0]
	r.Use, r.ToFloor, r.ToRTT, r.ToPeer = ci(100_000), ci(1.8), nil, nil
	rep.Rows = rep.Rows[:1]
	var b strings.Builder
	rep.WriteTable(&b)
	out := b.String()
	if got := column(t, out, "uncontended", "redis", "×floor"); got != "×1.80" {
		t.Errorf("×floor of one round = %q, want the figure alone", got)
	}
	if strings.Contains(out, "±: the") || !strings.Contains(out, "without ± comes from one round") {
		t.Errorf("the legend of a one-round table:\n%s", out)
	}
}

func TestTableFewRounds(t *testing.T) {
	rep := syntheticReport()
	r := rep.Rows[0]
	r.Use, r.ToFloor, r.ToRTT, r.ToPeer = ci(100_000, 99_000, 101_000), ci(1.8, 1.79, 1.82), nil, nil
	rep.Rows = rep.Rows[:1]
	var b strings.Builder
	rep.WriteTable(&b)
	out := b.String()
	for _, want := range []string{"median of 3 rounds,", "[min, max] of the rounds, which covers 75 %"} {
		if !strings.Contains(out, want) {
			t.Errorf("the legend of a three-round table lacks %q:\n%s", want, out)
		}
	}
	// Tables of 3 and of 7 rounds.
	rep.Rows = append(rep.Rows, syntheticReport().Rows[5])
	b.Reset()
	rep.WriteTable(&b)
	out = b.String()
	for _, want := range []string{"median of a table's rounds (3 to 7)", "which covers 75 %"} {
		if !strings.Contains(out, want) {
			t.Errorf("the legend of a three-round table lacks %q:\n%s", want, out)
		}
	}
}
