package bench

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
	"github.com/go-echarts/go-echarts/v2/render"
)

// echartsJS is Apache ECharts 5.6.0 (dist/echarts.min.js of the npm
// package "echarts", Apache-2.0, see internal/assets/ECHARTS-LICENSE),
// inlined into index.html so that the report needs no network.
//
//go:embed internal/assets/echarts.min.js
var echartsJS string

// chart is one figure of the HTML report.
type chart struct {
	Title   string
	Caption string
	Element template.HTML
	Script  template.HTML
}

var pageTmpl = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>dlockbench report {{.Rep.Started.Format "2006-01-02 15:04"}}</title>
<script>{{.JS}}</script>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2.2em; border-bottom: 1px solid #ddd; }
p.caption { color: #555; max-width: 900px; }
table { border-collapse: collapse; font-size: 0.9em; } td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: left; }
pre { font-size: 0.78em; overflow-x: auto; background: #f7f7f7; padding: 1em; }
.container { margin: 0; } .item { margin: 0; }
</style>
</head>
<body>
<h1>dlockbench: distributed lock backends compared</h1>
<p>Run {{.Rep.Started.Format "2006-01-02 15:04:05 MST"}}, took {{.Rep.DurationS}};
{{.Rep.GoVersion}}, GOMAXPROCS={{.Rep.GOMAXPROCS}} on {{.Rep.NumCPU}} CPUs ({{.Rep.Host}});
clients as {{if gt .Rep.Procs 1}}{{.Rep.Procs}} processes{{else}}goroutines of one process{{end}}{{if .Rep.Quick}}; quick run{{end}}.
Every figure was measured in this run, baselines and peers included. Mutual-exclusion violations: <b>{{.Violations}}</b>.</p>
<h2>Servers and the settings that change results</h2>
<table><tr><th>server</th><th>address</th><th>started by</th><th>settings</th></tr>
{{range .Rep.Servers}}<tr><td>{{.ID}}</td><td>{{.Addr}}</td><td>{{.Origin}}</td><td>{{range $k, $v := .Settings}}{{$k}}={{$v}}; {{end}}</td></tr>
{{end}}</table>
{{if .Rep.Skipped}}<p>Skipped: {{range .Rep.Skipped}}{{.}}; {{end}}</p>{{end}}
{{range .Charts}}
<h2>{{.Title}}</h2>
<p class="caption">{{.Caption}}</p>
{{.Element}}
{{.Script}}
{{end}}
<h2>All figures</h2>
<pre>{{.Table}}</pre>
</body>
</html>
`))

// WriteHTML writes index.html: the charts (scripts inlined, nothing
// fetched), the server settings and the full tables.
func (rep *Report) WriteHTML(w io.Writer) error {
	var table bytes.Buffer
	rep.WriteTable(&table)
	var viol uint64
	for _, r := range rep.Rows {
		viol += r.Violations + r.FencingViolations
	}
	return pageTmpl.Execute(w, map[string]any{
		"Rep":        rep,
		"JS":         template.JS(echartsJS),
		"Charts":     rep.charts(),
		"Table":      table.String(),
		"Violations": viol,
	})
}

func snippet(r render.Renderer, title, caption string) chart {
	s := r.RenderSnippet()
	return chart{Title: title, Caption: caption, Element: template.HTML(s.Element), Script: template.HTML(s.Script)}
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

func (rep *Report) charts() []chart {
	var out []chart
	if rows := rep.rowsOf(Uncontended, false); len(rows) > 0 {
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
		out = append(out, snippet(b, "Uncontended acquire latency per backend",
			"One client, acquire then release in a loop. Acquire latency percentiles (log scale), beside each server's raw round trip (rtt) and each strategy's hand-written floor."))

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
		out = append(out, snippet(l, "Uncontended acquire latency by percentile",
			"The same runs as percentile curves (HdrHistogram, one per client goroutine, merged)."))
	}
	for _, hold := range []string{"0s", "1ms"} {
		var labels []string
		for _, lb := range rep.Labels() {
			if strings.HasPrefix(lb, "handoff ") && strings.HasSuffix(lb, "hold="+hold) {
				labels = append(labels, lb)
			}
		}
		if len(labels) == 0 {
			continue
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
				best = max(best, r.IdealGrantsPerSec)
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
		out = append(out, snippet(l, "Grants per second vs waiters, hold "+hold,
			"One hot name; each waiter holds the lock for "+hold+", releases, works 2 ms, asks again. The ideal rate is 1/(hold + one round trip) of the fastest server, bounded by what the waiters ask for (waiters/(hold + work + round trip))."))
	}
	for _, lb := range []string{"handoff w=8 hold=1ms", "handoff w=32 hold=0s"} {
		rows := rep.rowsOf(lb, true)
		if len(rows) == 0 {
			continue
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
		out = append(out, snippet(l, "Handoff latency CDF, "+lb,
			"From the holder's release call to the next holder's acquire returning (one monotonic clock), for every grant whose acquirer was already waiting. Further left is faster; a long tail to the right is waiters sleeping through a release."))
	}
	var mk []string
	for _, lb := range rep.Labels() {
		if strings.HasPrefix(lb, "manykeys") {
			mk = append(mk, lb)
		}
	}
	if len(mk) > 0 {
		b := charts.NewBar()
		b.SetGlobalOptions(append(baseOpts("manykeys"),
			charts.WithYAxisOpts(opts.YAxis{Type: "log", Name: "grants/s"}),
			charts.WithXAxisOpts(opts.XAxis{AxisLabel: &opts.AxisLabel{Rotate: 30, Interval: "0"}}))...)
		names := rep.backendsOf(mk[0])
		b.SetXAxis(names)
		for _, lb := range mk {
			b.AddSeries(lb, rep.barValues(lb, names, func(r *Row) any { return logv(r.GrantsPerSec) }))
		}
		out = append(out, snippet(b, "Many keys: grants per second",
			"4× and 16× GOMAXPROCS clients, 10 000 names chosen uniformly, closed loop: throughput with little contention."))
	}
	if rows := rep.rowsOf("fairness c=16", true); len(rows) > 0 {
		names := rep.backendsOf("fairness c=16")
		b := charts.NewBar()
		b.SetGlobalOptions(append(baseOpts("fairness"),
			charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "Jain's index", Max: 1}),
			charts.WithXAxisOpts(opts.XAxis{AxisLabel: &opts.AxisLabel{Rotate: 30, Interval: "0"}}))...)
		b.SetXAxis(names).AddSeries("Jain's index", rep.barValues("fairness c=16", names, func(r *Row) any { return r.Jain }))
		out = append(out, snippet(b, "Fairness: Jain's index over grants per client",
			"16 clients on one name, each re-asking at once after its release: 1.0 means every client got the same share; a lock that lets the releaser barge in scores lower. The table gives the maximum wait."))
	}
	var ol []string
	for _, lb := range rep.Labels() {
		if strings.HasPrefix(lb, "openloop") {
			ol = append(ol, lb)
		}
	}
	if len(ol) > 0 {
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
		out = append(out, snippet(l, "Open loop: p99 latency vs offered load",
			"Poisson arrivals at 25/50/75% of each target's own many-keys capacity; latency counted from the intended start time whenever the client was still busy then, so a stalled server is not hidden (no coordinated omission); from the actual start when the client was idle, so that the timer's lateness is not counted."))
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
