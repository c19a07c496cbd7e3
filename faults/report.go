package faults

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a set of runs: a table of backend × fault.
type Report struct {
	// Command is the command line that produced the report.
	Command string        `json:"command"`
	Started time.Time     `json:"started"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// Skipped lists backends or faults that could not run, with why.
	Skipped []string  `json:"skipped,omitempty"`
	Results []*Result `json:"results"`
	// Faults documents every fault of the catalogue.
	Faults map[string]string `json:"faults"`
}

// NewReport returns an empty report for command.
func NewReport(command string) *Report {
	rep := &Report{Command: command, Started: time.Now(), Faults: map[string]string{}}
	for _, f := range Catalogue() {
		rep.Faults[f.Name] = f.Doc
	}
	return rep
}

// Failed reports whether any run broke an assertion.
func (rep *Report) Failed() bool {
	for _, r := range rep.Results {
		if len(r.Failures) > 0 {
			return true
		}
	}
	return false
}

func ms(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

// Name is the row's backend: "redis", or "redis sem×2" for a run on a
// semaphore of 2 permits.
func (r *Result) Name() string {
	if r.Permits > 0 {
		return fmt.Sprintf("%s sem×%d", r.Backend, r.Permits)
	}
	return r.Backend
}

// cells returns the columns of one row, as text.
func (r *Result) cells() []string {
	fenced := "n/a"
	if r.FencedViolations >= 0 {
		fenced = fmt.Sprint(r.FencedViolations)
		if !r.Fencing {
			fenced += " (no fencing)"
		}
	}
	overlap := "0"
	if r.Overlaps > 0 {
		overlap = fmt.Sprintf("%d (longest %s)", r.Overlaps, ms(r.LongestOverlap))
	}
	rec := "-"
	if len(r.Recoveries) > 0 || r.RecoveryMissing > 0 {
		rec = fmt.Sprintf("%s / %s", ms(r.RecoveryP50), ms(r.RecoveryMax))
		if r.RecoveryMissing > 0 {
			rec += fmt.Sprintf(" +%d never", r.RecoveryMissing)
		}
		// The verdict allows the bound plus the slack (a waiter's fallback
		// timer or poll): say both, or a recovery past the bound reads
		// as a pass the table cannot explain.
		rec += fmt.Sprintf(" (bound %s + %s slack)", ms(r.RecoveryBound), ms(r.RecoverySlack))
	}
	sig := "-"
	if r.Lost > 0 {
		yes := "yes"
		if r.Signalled < r.Lost {
			yes = "no"
		}
		sig = fmt.Sprintf("%s %d/%d", yes, r.Signalled, r.Lost)
		if !r.SignalExpected {
			sig += " (not promised)"
		}
	}
	verdict := "ok"
	if len(r.Failures) > 0 {
		verdict = "FAIL: " + strings.Join(r.Failures, "; ")
	} else if r.Unsafe {
		verdict = "ok (unsafe by design)"
	} else if r.FencedViolations > 0 {
		verdict = "ok (no fencing declared)"
	}
	return []string{
		r.Name(), r.Fault, fmt.Sprint(r.Ops), fmt.Sprint(r.Injections),
		fmt.Sprintf("%d/%d", r.WritesRejected, r.Writes), fenced, overlap, rec, sig, verdict,
	}
}

var columns = []string{
	"backend", "fault", "ops", "faults", "writes rejected", "fenced violations",
	"raw overlaps", "recovery p50 / max", "loss signalled before regrant", "verdict",
}

// WriteText writes the table as aligned text.
func (rep *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	for _, r := range rep.Results {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range rep.Skipped {
		if _, err := fmt.Fprintln(w, "skipped:", s); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error { return writeJSON(w, rep) }

var htmlTmpl = template.Must(template.New("faults").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dlock: safety under faults</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;font-size:14px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}
tr.fail td{background:#fde2e2}
tr.unsafe td{background:#fff6dc}
code{font-size:13px}
dt{font-weight:bold;margin-top:.5em}
</style></head><body>
<h1 id="faults">Safety under faults</h1>
<p>Command: <code>{{.Command}}</code><br>Started {{.Started.UTC.Format "2006-01-02 15:04:05 UTC"}}, took {{.Elapsed}}.</p>
<p>Each row is one run: client processes loop acquire &rarr; write to a fenced register with the token &rarr; hold 0&ndash;2&times;TTL &rarr; write again &rarr; release,
while the fault is injected on a schedule. <b>Fenced violations</b> (porcupine, fenced-mutex model) must be 0.
<b>Raw overlaps</b> are grants whose holders both believed they held the lock at once (the raw history checked as a plain mutex): a measured unsafe window, not a failure.
<b>Recovery</b> is the time from a holder's death (kill, pause) to the next grant, against the backend's stated bound (a lease's TTL, a session's timeout) plus the slack waiters get to notice (the server's own expiry sweep, a watch's fallback timer, a poll): the larger of 1 s and the TTL.
<b>Loss signalled</b> counts lost leases whose holder knew (Done closed, or its local deadline passed) before the next grant.
Yellow rows are faults the backend is documented not to survive; red rows broke an assertion.</p>
<table><tr>{{range .Columns}}<th>{{.}}</th>{{end}}<th>history</th></tr>
{{range .Rows}}<tr class="{{.Class}}">{{range .Cells}}<td>{{.}}</td>{{end}}<td>{{if .Viz}}<a href="{{.Viz}}">porcupine</a>{{end}}</td></tr>
{{end}}</table>
{{if .Skipped}}<h2>Not run</h2><ul>{{range .Skipped}}<li>{{.}}</li>{{end}}</ul>{{end}}
<h2>Faults</h2><dl>{{range .FaultDocs}}<dt>{{.Name}}</dt><dd>{{.Doc}}</dd>{{end}}</dl>
</body></html>
`))

// WriteHTML writes a self-contained HTML page; links to visualisations are
// made relative to dir (the directory the page is written to).
func (rep *Report) WriteHTML(w io.Writer, dir string) error {
	type row struct {
		Class string
		Cells []string
		Viz   string
	}
	type doc struct{ Name, Doc string }
	data := struct {
		*Report
		Columns   []string
		Rows      []row
		FaultDocs []doc
	}{Report: rep, Columns: columns}
	for _, r := range rep.Results {
		rw := row{Cells: r.cells()}
		switch {
		case len(r.Failures) > 0:
			rw.Class = "fail"
		case r.Unsafe:
			rw.Class = "unsafe"
		}
		if r.Visualization != "" {
			rel, err := filepath.Rel(dir, r.Visualization)
			if err != nil {
				rel = r.Visualization
			}
			rw.Viz = rel
		}
		data.Rows = append(data.Rows, rw)
	}
	for _, f := range Catalogue() {
		data.FaultDocs = append(data.FaultDocs, doc{f.Name, f.Doc})
	}
	return htmlTmpl.Execute(w, data)
}

// Save writes faults.txt, faults.json and faults.html into dir.
func (rep *Report) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	for _, out := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{"faults.txt", rep.WriteText},
		{"faults.json", rep.WriteJSON},
		{"faults.html", func(w io.Writer) error { return rep.WriteHTML(w, dir) }},
	} {
		f, err := os.Create(filepath.Join(dir, out.name))
		if err != nil {
			return fmt.Errorf("faults: %w", err)
		}
		err = out.write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("faults: write %s: %w", out.name, err)
		}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
