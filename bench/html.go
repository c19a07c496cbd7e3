package bench

import (
	"bytes"
	_ "embed"
	"html/template"
	"io"

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
