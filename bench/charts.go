package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
)

// charts builds the figures of the HTML report, in page order; a figure
// whose workloads did not run is left out.
func (rep *Report) charts() []chart {
	builders := []func() (chart, bool){
		rep.uncontendedChart,
		rep.uncontendedCurveChart,
		func() (chart, bool) { return rep.grantsChart("0s") },
		func() (chart, bool) { return rep.grantsChart("1ms") },
		func() (chart, bool) { return rep.handoffCDFChart("handoff w=8 hold=1ms") },
		func() (chart, bool) { return rep.handoffCDFChart("handoff w=32 hold=0s") },
		rep.manyKeysChart,
		rep.fairnessChart,
		rep.openLoopChart,
	}
	var out []chart
	for _, build := range builders {
		if c, ok := build(); ok {
			out = append(out, c)
		}
	}
	return out
}

// uncontendedChart: acquire latency percentiles per backend, as bars.
func (rep *Report) uncontendedChart() (chart, bool) {
	rows := rep.rowsOf(Uncontended, false)
	if len(rows) == 0 {
		return chart{}, false
	}
	names := make([]string, len(rows))
	var p50, p99, p999 []opts.BarData
	for i, r := range rows {
		names[i] = r.Backend
		p50 = append(p50, opts.BarData{Value: us(r.P50)})
		p99 = append(p99, opts.BarData{Value: us(r.P99)})
		p999 = append(p999, opts.BarData{Value: us(r.P999)})
	}
	b := charts.NewBar()
	b.SetGlobalOptions(append(baseOpts("uncontended_pct"),
		charts.WithYAxisOpts(opts.YAxis{Type: "log", Name: "µs"}),
		charts.WithXAxisOpts(opts.XAxis{AxisLabel: &opts.AxisLabel{Rotate: 30, Interval: "0"}}))...)
	b.SetXAxis(names).AddSeries("p50", p50).AddSeries("p99", p99).AddSeries("p99.9", p999)
	return snippet(b, "Uncontended acquire latency per backend",
		"One client, acquire then release in a loop. Acquire latency percentiles (log scale), beside each server's raw round trip (rtt) and each strategy's hand-written floor."), true
}

// uncontendedCurveChart: the same runs as percentile curves.
func (rep *Report) uncontendedCurveChart() (chart, bool) {
	rows := rep.rowsOf(Uncontended, false)
	if len(rows) == 0 {
		return chart{}, false
	}
	l := charts.NewLine()
	l.SetGlobalOptions(append(baseOpts("uncontended_curve"),
		charts.WithYAxisOpts(opts.YAxis{Type: "log", Name: "µs"}))...)
	var xs []string
	for _, q := range quantiles {
		xs = append(xs, pctLabel(q))
	}
	l.SetXAxis(xs)
	for _, r := range rows {
		var d []opts.LineData
		for _, p := range r.Latency {
			d = append(d, opts.LineData{Value: logv(p[1] / 1e3)})
		}
		l.AddSeries(r.Backend, d)
	}
	return snippet(l, "Uncontended acquire latency by percentile",
		"The same runs as percentile curves (HdrHistogram, one per client goroutine, merged)."), true
}

// grantsChart: grants per second against the number of waiters on one
// hot name, for the handoff workloads with this hold.
func (rep *Report) grantsChart(hold string) (chart, bool) {
	var labels []string
	for _, lb := range rep.Labels() {
		if strings.HasPrefix(lb, "handoff ") && strings.HasSuffix(lb, "hold="+hold) {
			labels = append(labels, lb)
		}
	}
	if len(labels) == 0 {
		return chart{}, false
	}
	var xs []string
	series := map[string][]opts.LineData{}
	var order []string
	ideal := []opts.LineData{}
	for _, lb := range labels {
		rows := rep.rowsOf(lb, true)
		if len(rows) == 0 {
			continue
		}
		xs = append(xs, fmt.Sprint(rows[0].Params["clients"]))
		var best float64
		for _, r := range rows {
			if !slices.Contains(order, r.Backend) {
				order = append(order, r.Backend)
			}
			series[r.Backend] = append(series[r.Backend], opts.LineData{Value: logv(r.GrantsPerSec), Name: lb})
			best = max(best, Med(r.Ideal))
		}
		ideal = append(ideal, opts.LineData{Value: logv(best)})
	}
	l := charts.NewLine()
	l.SetGlobalOptions(append(baseOpts("grants_waiters_"+strings.ReplaceAll(hold, ".", "_")),
		charts.WithYAxisOpts(opts.YAxis{Type: "log", Name: "grants/s"}),
		charts.WithXAxisOpts(opts.XAxis{Name: "waiters"}))...)
	l.SetXAxis(xs)
	for _, n := range order {
		if len(series[n]) == len(xs) {
			l.AddSeries(n, series[n])
		}
	}
	if slices.ContainsFunc(ideal, func(d opts.LineData) bool { return d.Value != "-" }) {
		l.AddSeries("ideal, fastest server", ideal)
	}
	return snippet(l, "Grants per second vs waiters, hold "+hold,
		"One hot name; each waiter holds the lock for "+hold+", releases, works 2 ms, asks again. The ideal rate is 1/(hold + one round trip) of the fastest server, bounded by what the waiters ask for (waiters/(hold + work + round trip))."), true
}

// handoffCDFChart: the distribution of handoff latency on one workload.
func (rep *Report) handoffCDFChart(lb string) (chart, bool) {
	rows := rep.rowsOf(lb, true)
	if len(rows) == 0 {
		return chart{}, false
	}
	l := charts.NewLine()
	l.SetGlobalOptions(append(baseOpts("cdf_"+strings.NewReplacer(" ", "_", "=", "", ".", "_").Replace(lb)),
		charts.WithXAxisOpts(opts.XAxis{Type: "log", Name: "handoff µs"}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "fraction", Max: 1}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "item"}))...)
	for _, r := range rows {
		var d []opts.LineData
		for _, p := range r.HandoffCDF {
			d = append(d, opts.LineData{Value: []float64{max(p[1]/1e3, 0.1), p[0]}})
		}
		if len(d) > 0 {
			l.AddSeries(r.Backend, d, charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}))
		}
	}
	return snippet(l, "Handoff latency CDF, "+lb,
		"From the holder's release call to the next holder's acquire returning (one monotonic clock), for every grant whose acquirer was already waiting. Further left is faster; a long tail to the right is waiters sleeping through a release."), true
}

// manyKeysChart: throughput on many names, one bar series per workload.
func (rep *Report) manyKeysChart() (chart, bool) {
	var mk []string
	for _, lb := range rep.Labels() {
		if strings.HasPrefix(lb, "manykeys") {
			mk = append(mk, lb)
		}
	}
	if len(mk) == 0 {
		return chart{}, false
	}
	b := charts.NewBar()
	b.SetGlobalOptions(append(baseOpts("manykeys"),
		charts.WithYAxisOpts(opts.YAxis{Type: "log", Name: "grants/s"}),
		charts.WithXAxisOpts(opts.XAxis{AxisLabel: &opts.AxisLabel{Rotate: 30, Interval: "0"}}))...)
	names := rep.backendsOf(mk[0])
	b.SetXAxis(names)
	for _, lb := range mk {
		b.AddSeries(lb, rep.barValues(lb, names, func(r *Row) any { return logv(r.GrantsPerSec) }))
	}
	return snippet(b, "Many keys: grants per second",
		"4× and 16× GOMAXPROCS clients, 10 000 names chosen uniformly, closed loop: throughput with little contention."), true
}

// fairnessChart: Jain's index of the fairness workload.
func (rep *Report) fairnessChart() (chart, bool) {
	if len(rep.rowsOf("fairness c=16", true)) == 0 {
		return chart{}, false
	}
	names := rep.backendsOf("fairness c=16")
	b := charts.NewBar()
	b.SetGlobalOptions(append(baseOpts("fairness"),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "Jain's index", Max: 1}),
		charts.WithXAxisOpts(opts.XAxis{AxisLabel: &opts.AxisLabel{Rotate: 30, Interval: "0"}}))...)
	b.SetXAxis(names).AddSeries("Jain's index", rep.barValues("fairness c=16", names, func(r *Row) any { return r.Jain }))
	return snippet(b, "Fairness: Jain's index over grants per client",
		"16 clients on one name, each re-asking at once after its release: 1.0 means every client got the same share; a lock that lets the releaser barge in scores lower. The table gives the maximum wait."), true
}

// openLoopChart: p99 latency against the offered load.
func (rep *Report) openLoopChart() (chart, bool) {
	var ol []string
	for _, lb := range rep.Labels() {
		if strings.HasPrefix(lb, "openloop") {
			ol = append(ol, lb)
		}
	}
	if len(ol) == 0 {
		return chart{}, false
	}
	names := rep.backendsOf(ol[0])
	l := charts.NewLine()
	l.SetGlobalOptions(append(baseOpts("openloop"),
		charts.WithYAxisOpts(opts.YAxis{Type: "log", Name: "p99 µs"}),
		charts.WithXAxisOpts(opts.XAxis{Name: "offered load"}))...)
	var xs []string
	for _, lb := range ol {
		xs = append(xs, strings.TrimPrefix(lb, "openloop "))
	}
	l.SetXAxis(xs)
	for _, n := range names {
		var d []opts.LineData
		for _, lb := range ol {
			var v any = "-"
			for _, r := range rep.rowsOf(lb, true) {
				if r.Backend == n {
					v = us(r.P99)
				}
			}
			d = append(d, opts.LineData{Value: v})
		}
		l.AddSeries(n, d)
	}
	return snippet(l, "Open loop: p99 latency vs offered load",
		"Poisson arrivals at 25/50/75% of each target's own many-keys capacity; latency counted from the intended start time whenever the client was still busy then, so a stalled server is not hidden (no coordinated omission); from the actual start when the client was idle, so that the timer's lateness is not counted."), true
}

func us(ns int64) any { return logv(float64(ns) / 1e3) }

// logv is a value for a log-scale axis: ECharts draws "-" as a gap, while
// a zero would break the axis.
func logv(v float64) any {
	if v <= 0 {
		return "-"
	}
	return v
}

func baseOpts(id string) []charts.GlobalOpts {
	return []charts.GlobalOpts{
		charts.WithInitializationOpts(opts.Initialization{ChartID: id, Width: "1050px", Height: "460px", Renderer: "canvas"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Type: "scroll", Top: "0"}),
		charts.WithAnimation(false),
	}
}

// rowsOf returns the measured rows of a workload configuration.
func (rep *Report) rowsOf(label string, contendingOnly bool) []*Row {
	var out []*Row
	for _, r := range rep.Rows {
		if r.Label == label && r.Skipped == "" && r.Grants > 0 && (!contendingOnly || r.Kind == KindDlock || r.Kind == KindPeer) {
			out = append(out, r)
		}
	}
	return out
}

func pctLabel(q float64) string {
	if q == 1 {
		return "max"
	}
	return "p" + strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", q*100), "0"), ".0")
}

func (rep *Report) backendsOf(label string) []string {
	var out []string
	for _, r := range rep.rowsOf(label, false) {
		out = append(out, r.Backend)
	}
	return out
}

func (rep *Report) barValues(label string, names []string, f func(*Row) any) []opts.BarData {
	vals := make([]opts.BarData, len(names))
	for i, n := range names {
		vals[i] = opts.BarData{Value: "-"}
		for _, r := range rep.rowsOf(label, false) {
			if r.Backend == n {
				vals[i] = opts.BarData{Value: f(r)}
			}
		}
	}
	return vals
}
