package bench

import (
	"bytes"
	"cmp"
	"fmt"
	"html/template"
	"io"
	"strings"
)

// pageCSS styles index.html. The charts are inline SVG (svg.go) whose
// viewBox scales them to their column: two columns of small multiples on
// a wide screen, one on a narrow one or on paper.
const pageCSS = `
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 1360px; padding: 0 16px; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
p, ul, blockquote { max-width: 920px; } p.caption { color: #555; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; } td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; white-space: nowrap; }
.scroll { overflow-x: auto; }
blockquote { border-left: 4px solid #2563b0; margin: 0.8em 0; padding: 0.4em 1em; background: #f5f8fc; }
.confirmed { color: #1b5e20; font-weight: 600; } .refuted { color: #b71c1c; font-weight: 600; } .depends { color: #8a5a00; font-weight: 600; }
.tie { color: #8a5a00; } .warn { color: #b71c1c; }
pre { font-size: 0.78em; overflow-x: auto; background: #f7f7f7; padding: 1em; }
figure.chart { margin: 1.5em 0 2em; } figure.chart h2 { margin-top: 0.6em; }
.panels { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 12px 28px; }
@media (max-width: 640px) { .panels { grid-template-columns: 1fr; } }
svg.panel { width: 100%; height: auto; display: block; font-size: 13px; }
.key { display: flex; flex-wrap: wrap; gap: 4px 20px; align-items: center; font-size: 0.88em; margin: 0.3em 0 0.9em; }
.keyitem { display: inline-flex; align-items: center; gap: 6px; } .key .wide { color: #c62828; }
svg text { fill: #222; } svg .title { font-weight: 600; font-size: 15px; } svg .group { font-style: italic; fill: #555; }
svg .head, svg .tick, svg .axisname, svg .note { fill: #555; font-size: 12px; } svg .right { font-variant-numeric: tabular-nums; }
svg .wide { fill: #c62828; } svg path.wide { fill: none; }
svg .grid { stroke: #e6e6e6; } svg .axis { stroke: #999; } svg path { fill: none; stroke-width: 1.4; }
svg .tail { stroke-width: 2; } svg .mark { stroke-width: 2.5; }
@media print { body { max-width: none; } .panels { grid-template-columns: 1fr 1fr; } figure.chart { break-inside: avoid-page; } }
`

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"dur":          func(v float64) string { return dur(int64(v)) },
	"rate":         rate,
	"join":         func(s []string) string { return strings.Join(s, ", ") },
	"dash":         func(s string) string { return cmp.Or(s, "—") },
	"safetyLegend": func() string { return SafetyLegend },
	"answerClass": func(a string) string {
		switch {
		case strings.HasPrefix(a, "confirmed"):
			return "confirmed"
		case strings.HasPrefix(a, "refuted"):
			return "refuted"
		case strings.HasPrefix(a, "depends"):
			return "depends"
		}
		return ""
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dlockbench report {{.Rep.Started.Format "2006-01-02 15:04"}}</title>
<style>{{.CSS}}</style>
</head>
<body>
<h1>dlockbench: which distributed lock backend, and why</h1>
<p>Run {{.Rep.Started.Format "2006-01-02 15:04 MST"}} on {{.Rep.Host}}{{if .Rep.Quick}} (a quick run: short measurements, fewer configurations){{end}}.
Mutual-exclusion violations in the whole run: <b{{if .Violations}} class="warn"{{end}}>{{.Violations}}</b>.</p>

<section id="verdict">
<h2>Verdict: who wins each workload</h2>
{{with .V.Workloads}}<div class="scroll"><table>
<tr><th>workload</th><th>decided by</th><th>winner</th><th>also within the interval</th><th>in a sentence</th></tr>
{{range .}}<tr><td>{{.Label}}</td><td>{{.Metric}}</td><td>{{if .Tie}}<span class="tie">tie:</span> {{end}}<b>{{join .Winners}}</b></td><td>{{join .RunnersUp}}</td><td>{{.Text}}</td></tr>
{{end}}</table></div>
<p class="caption">A winner is called only where its interval does not overlap the next target's; otherwise the workload is a tie between every target whose interval overlaps the best one.</p>
{{else}}<p>No workload verdict: the report holds none.</p>{{end}}
</section>

<section id="safety">
<h2>Safety beside speed</h2>
{{with .V.Safety}}<div class="scroll"><table>
<tr><th>backend/strategy</th><th>fencing token</th><th>survives server restart</th><th>fair</th><th>waiters</th><th>freed after a client crash</th><th>lost-lease signal</th><th>violations under faults</th><th>uncontended use p50</th><th>handoff grants/s</th></tr>
{{range .}}<tr><td><b>{{.Target}}</b></td><td>{{dash .Fencing}}</td><td>{{dash .SurvivesRestart}}</td><td>{{dash .Fair}}</td><td>{{dash .Waiters}}</td><td>{{dash .FreedAfterCrash}}</td><td>{{dash .LostLease}}</td><td class="num">{{with .FaultViolations}}{{.}}{{else}}not run{{end}}</td><td class="num">{{dur .UseNs}}</td><td class="num">{{rate .HandoffPerSec}}</td></tr>
{{end}}</table></div>
<p class="caption">{{safetyLegend}}</p>
{{else}}<p>No safety table: the report holds no dlock backend.</p>{{end}}
</section>

<section id="claims">
<h2>The seed articles' claims</h2>
{{with .V.Claims}}<table>
<tr><th>claim</th><th>this run says</th><th>the figures that decide it</th></tr>
{{range .}}<tr><td>{{.Claim}}</td><td class="{{answerClass .Answer}}">{{.Answer}}</td><td>{{.Figures}}</td></tr>
{{end}}</table>
{{else}}<p>The claims were not answered.</p>{{end}}
</section>

<section id="paragraph">
<h2>For a design document</h2>
{{with .V.Paragraph}}<blockquote>{{.}}</blockquote>{{else}}<p>No summary paragraph.</p>{{end}}
</section>

{{with .V.Caveats}}<section id="caveats">
<h2>Caveats</h2>
<ul>{{range .}}<li>{{.}}</li>
{{end}}</ul>
</section>{{end}}

<section id="run">
<h2>The machine and the run</h2>
<p>{{.LoadText}}</p>
<p>Took {{.Rep.DurationS}}; {{.Rep.GoVersion}}, GOMAXPROCS={{.Rep.GOMAXPROCS}} on {{.Rep.NumCPU}} CPUs;
clients as {{if gt .Rep.Procs 1}}{{.Rep.Procs}} processes{{else}}goroutines of one process{{end}}{{if .Rep.WarmCPUs}}; the CPUs kept out of their idle state by idle-priority spinners (-warm-cpus){{end}}{{if .Rep.ClientCPUs}}; {{if eq .Rep.PinnedWorkloads "all"}}throughout the run{{else}}during the uncontended workloads{{end}}, the clients on CPU {{.Rep.ClientCPUs}} and the servers on CPU {{.Rep.ServerCPUs}} (-pin-cpus {{.Rep.PinnedWorkloads}}){{end}}.
{{if gt .Rep.Rounds 0}}Each workload ran {{.Rep.Rounds}} rounds, its targets alternating within each; a figure is the median of the rounds with its {{.Cover}} % interval, marked in red where it is wider than ±{{.Wide}} %.{{end}}
Every figure was measured in this run, baselines and peers included.</p>
{{if .Rep.Command}}<p><code>{{.Rep.Command}}</code></p>{{end}}
</section>

<section id="charts">
{{range .Charts}}<figure class="chart" id="fig-{{.ID}}" data-chart="{{.ID}}">
<h2>{{.Title}}</h2>
<p class="caption">{{.Caption}}</p>
{{.Key}}
<div class="panels">
{{range .Panels}}{{.}}
{{end}}</div>
</figure>
{{end}}</section>

<section id="servers">
<h2>Servers and the settings that change results</h2>
<div class="scroll"><table><tr><th>server</th><th>address</th><th>started by</th><th>settings</th></tr>
{{range .Rep.Servers}}<tr><td>{{.ID}}</td><td>{{.Addr}}</td><td>{{.Origin}}</td><td>{{range $k, $v := .Settings}}{{$k}}={{$v}}; {{end}}</td></tr>
{{end}}</table></div>
{{if .Rep.Skipped}}<p>Skipped: {{range .Rep.Skipped}}{{.}}; {{end}}</p>{{end}}
</section>

<section id="figures">
<h2>All figures</h2>
<pre>{{.Table}}</pre>
</section>
</body>
</html>
`))

// busyOther is the CPU share, in percent, that other processes may use
// before the page warns that the machine was not quiet.
const busyOther = 10

// loadText says how loaded the machine was during the run.
func (rep *Report) loadText() template.HTML {
	l := rep.Load
	if l == nil {
		return "The machine's load was not recorded: read the figures with care."
	}
	s := fmt.Sprintf("Machine load: the one-minute load average was %.2f at the start and %.2f at the end; "+
		"the CPUs were %.0f %% busy during the run, and processes other than the benchmark and its servers used %.0f %% of them.",
		l.Avg1Start, l.Avg1End, l.BusyPct, l.OtherPct)
	if l.OtherPct > busyOther {
		return template.HTML(`<span class="warn">` + template.HTMLEscapeString(s) + ` The machine was not quiet: the figures are noisier than they should be.</span>`)
	}
	return template.HTML(template.HTMLEscapeString(s + " Figures are only as steady as the machine was quiet."))
}

// WriteHTML writes index.html: the verdict first, then the safety table,
// the claims, the run's facts, the charts (inline SVG: no script, nothing
// fetched), the server settings and the full tables. A report without a
// verdict gets one from Decide.
func (rep *Report) WriteHTML(w io.Writer) error {
	var table bytes.Buffer
	rep.WriteTable(&table)
	var viol uint64
	for _, r := range rep.Rows {
		viol += r.Violations + r.FencingViolations
	}
	v := rep.Verdict
	if v == nil {
		v = Decide(rep)
	}
	if v == nil {
		v = &Verdict{}
	}
	return pageTmpl.Execute(w, map[string]any{
		"Rep":        rep,
		"V":          v,
		"CSS":        template.CSS(pageCSS),
		"Charts":     rep.charts(),
		"Table":      table.String(),
		"Violations": viol,
		"LoadText":   rep.loadText(),
		"Wide":       fmt.Sprintf("%.0f", WideInterval*100),
		"Cover":      fmt.Sprintf("%.0f", 100*rep.coverage()),
	})
}
