package bench

import (
	"slices"

	"github.com/dlock-go/dlock/internal/stats"
)

// Confidence is the coverage asked of every interval in the report.
const Confidence = 0.95

// WideInterval is the half-width, relative to the median, above which the
// report marks a figure as unsettled (±10 %).
const WideInterval = 0.10

// AggregateRounds turns the rounds of one target on one workload (one
// Result per round, in round order) into one row: percentiles from the
// merged histograms, and Rate, Use and the measured hold as the median of
// the rounds with an interval. Results of skipped rounds are nil and
// left out.
func AggregateRounds(rounds []*Result) *Row {
	var merged *Result
	var figs []RoundFigures
	for i, res := range rounds {
		if res == nil {
			continue
		}
		one := NewRow(res)
		f := RoundFigures{Round: i, UseNs: float64(one.P50 + one.ReleaseP50), GrantsPerSec: one.GrantsPerSec, P99Ns: float64(one.P99),
			Settle: res.Settle, Background: res.Background}
		if res.Hold != nil && res.Hold.TotalCount() > 0 {
			f.HoldNs = float64(res.Hold.ValueAtQuantile(50))
		}
		figs = append(figs, f)
		if merged == nil {
			m := *res
			m.Acquire, m.Release, m.Handoff, m.Hold = newHist(), newHist(), newHist(), newHist()
			m.Grants = slices.Clone(res.Grants)
			m.Elapsed, m.Exclusion, m.Fencing, m.Errors, m.Failed = 0, 0, 0, 0, 0
			m.Server = ServerDelta{HasCommands: res.Server.HasCommands, HasCPU: res.Server.HasCPU}
			merged = &m
		} else {
			for i := range min(len(merged.Grants), len(res.Grants)) {
				merged.Grants[i] += res.Grants[i]
			}
		}
		merged.Acquire.Merge(res.Acquire)
		merged.Release.Merge(res.Release)
		merged.Handoff.Merge(res.Handoff)
		if res.Hold != nil {
			merged.Hold.Merge(res.Hold)
		}
		merged.Elapsed += res.Elapsed
		merged.Exclusion += res.Exclusion
		merged.Fencing += res.Fencing
		merged.Errors += res.Errors
		merged.Failed += res.Failed
		merged.MaxWait = max(merged.MaxWait, res.MaxWait)
		if res.LastErr != "" {
			merged.LastErr = res.LastErr
		}
		merged.Server.Commands += res.Server.Commands
		merged.Server.CPU += res.Server.CPU
		merged.Server.Grants += res.Server.Grants
		merged.Server.HasCommands = merged.Server.HasCommands && res.Server.HasCommands
		merged.Server.HasCPU = merged.Server.HasCPU && res.Server.HasCPU
	}
	if merged == nil {
		return nil
	}
	row := NewRow(merged)
	row.Rounds = figs
	row.Settle, row.SettleRounds = settleRounds(figs)
	pick := func(f func(RoundFigures) float64) []float64 {
		xs := make([]float64, len(figs))
		for i, r := range figs {
			xs[i] = f(r)
		}
		return xs
	}
	row.Rate = stats.MedianCI(pick(func(r RoundFigures) float64 { return r.GrantsPerSec }), Confidence)
	row.GrantsPerSec = row.Rate.Median
	row.Use = stats.MedianCI(pick(func(r RoundFigures) float64 { return r.UseNs }), Confidence)
	if row.Workload == OpenLoop {
		row.RoundP99 = stats.MedianCI(pick(func(r RoundFigures) float64 { return r.P99Ns }), Confidence)
	}
	if merged.Hold.TotalCount() > 0 {
		row.HoldNs = merged.Hold.ValueAtQuantile(50)
	}
	return row
}

// Rotation returns the order in which n targets run in round r: even
// rounds run forwards from target r mod n, odd rounds backwards from it,
// so that no target always runs right after another (the one after a
// slow target inherits its aftermath: compactions, fsyncs, a cold cache),
// not even of two, and every target starts as many rounds as the others
// over n rounds.
func Rotation(n, r int) []int {
	order := make([]int, n)
	for i := range order {
		if r%2 == 0 {
			order[i] = (r + i) % n
		} else {
			order[i] = ((r-i)%n + n) % n
		}
	}
	return order
}

// GroupedRotation is Rotation for targets in groups (group[i] is target
// i's): the groups take turns in Rotation order, and within each turn a
// group's targets run one after another, in Rotation order among
// themselves. The targets compared with each other (a dlock row, its
// floor, its peers and its round trip share a server: Target.Server) then
// run side by side in every round. Under Rotation alone a round that
// started inside a group split it, its first targets running at the end
// of the turn and the rest at its start, a whole turn through every other
// server apart: in a full run (some 45 targets, a turn of 100 ms or more)
// the machine changes speed within a turn (on the project's 2-core VM a
// Redis round trip takes 17 µs or 55 µs from one stretch of milliseconds
// to the next, every client alike), and the per-round ratio of two
// targets of a split group measured that change:
// Redis ×floor medians of 1.25 to 1.44 with intervals of ±41 %, where
// runs of the Redis targets alone gave 0.98 to 1.07.
func GroupedRotation(group []string, r int) []int {
	var keys []string
	members := map[string][]int{}
	for i, g := range group {
		if _, ok := members[g]; !ok {
			keys = append(keys, g)
		}
		members[g] = append(members[g], i)
	}
	order := make([]int, 0, len(group))
	for _, gi := range Rotation(len(keys), r) {
		m := members[keys[gi]]
		for _, j := range Rotation(len(m), r) {
			order = append(order, m[j])
		}
	}
	return order
}
