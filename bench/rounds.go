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
