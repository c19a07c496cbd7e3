package bench

import (
	"cmp"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The scale curves of the HTML report: one figure per curve (names,
// leases, waiters), one panel per server family, a line per dlock target
// over the curve's points, and the target the issue sets as a dashed
// line. Like the bar charts, inline SVG with every label a <text>.

// curveSeries is one target's line.
type curveSeries struct {
	Name, Colour string
	// Y is the figure at each of the panel's points (NaN: not measured).
	Y []float64
	// Labels are printed beside the points.
	Labels []string
}

// curvePanel is one family's panel of a curve figure.
type curvePanel struct {
	Title  string
	X      []string // the points' labels, evenly spaced
	Axis   string   // the y axis
	Format func(float64) string
	// Ref is the target line (0: none), RefLabel its words.
	Ref      float64
	RefLabel string
	Series   []curveSeries
	Notes    []string
}

// Curve geometry, in viewBox units.
const (
	curveH     = 200.0 // the plot's height
	curveLeft  = 56.0  // room for the y ticks
	curveRight = 200.0 // room for the series' names at their line's end
)

// svg draws the panel.
func (p *curvePanel) svg(chart string) string {
	height := titleH + curveH + axisH + noteH*float64(len(p.Notes)) + 12
	top, bottom := titleH+6, titleH+6+curveH
	x0, x1 := curveLeft, svgWidth-curveRight
	hi := p.Ref * 1.15
	for _, s := range p.Series {
		for _, y := range s.Y {
			if drawable(y) {
				hi = max(hi, y)
			}
		}
	}
	if hi <= 0 {
		hi = 1
	}
	step := niceStep(hi / 4)
	hi = math.Ceil(hi/step) * step
	yOf := func(v float64) float64 { return bottom - (bottom-top)*v/hi }
	xOf := func(i int) float64 {
		if len(p.X) < 2 {
			return (x0 + x1) / 2
		}
		return x0 + (x1-x0)*float64(i)/float64(len(p.X)-1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="panel curve" data-chart="%s" data-panel="%s" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`,
		svgEsc(chart), svgEsc(p.Title), svgWidth, height, svgEsc(p.Title+": "+p.Axis))
	fmt.Fprintf(&b, `<text class="title" x="4" y="17">%s</text>`, svgEsc(p.Title))
	for t := 0.0; t <= hi+step/2; t += step {
		fmt.Fprintf(&b, `<line class="grid" x1="%s" x2="%s" y1="%s" y2="%s"/>`, svgNum(x0), svgNum(x1), svgNum(yOf(t)), svgNum(yOf(t)))
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="end">%s</text>`, svgNum(x0-4), svgNum(yOf(t)+4), svgEsc(p.Format(t)))
	}
	if p.Ref > 0 {
		fmt.Fprintf(&b, `<line class="ref" stroke="%s" stroke-dasharray="5 4" x1="%s" x2="%s" y1="%s" y2="%s"/>`,
			wideColour, svgNum(x0), svgNum(x1), svgNum(yOf(p.Ref)), svgNum(yOf(p.Ref)))
		fmt.Fprintf(&b, `<text class="note" fill="%s" x="%s" y="%s">%s</text>`, wideColour, svgNum(x1+4), svgNum(yOf(p.Ref)+4), svgEsc(p.RefLabel))
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%s" x2="%s" y1="%s" y2="%s"/>`, svgNum(x0), svgNum(x1), svgNum(bottom), svgNum(bottom))
	for i, x := range p.X {
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="middle">%s</text>`, svgNum(xOf(i)), svgNum(bottom+14), svgEsc(x))
	}
	fmt.Fprintf(&b, `<text class="axisname" x="%s" y="%s" text-anchor="middle">%s</text>`, svgNum((x0+x1)/2), svgNum(bottom+30), svgEsc(p.Axis))
	// The names at the lines' ends, moved apart so that they do not overlap.
	type end struct {
		y    float64
		name string
		c    string
	}
	var ends []end
	for _, s := range p.Series {
		var pts []string
		last := -1
		for i, y := range s.Y {
			if !drawable(y) && y != 0 {
				continue
			}
			pts = append(pts, svgNum(xOf(i))+","+svgNum(yOf(y)))
			fmt.Fprintf(&b, `<circle class="point" cx="%s" cy="%s" r="3" fill="%s"><title>%s</title></circle>`,
				svgNum(xOf(i)), svgNum(yOf(y)), s.Colour, svgEsc(s.Name+" at "+p.X[i]+": "+s.Labels[i]))
			last = i
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline class="line" fill="none" stroke="%s" stroke-width="2" points="%s"/>`, s.Colour, strings.Join(pts, " "))
		}
		if last >= 0 {
			ends = append(ends, end{yOf(s.Y[last]), s.Name + " " + s.Labels[last], s.Colour})
		}
	}
	slices.SortFunc(ends, func(a, b end) int { return cmp.Compare(a.y, b.y) })
	for i := 1; i < len(ends); i++ {
		ends[i].y = max(ends[i].y, ends[i-1].y+13)
	}
	for _, e := range ends {
		fmt.Fprintf(&b, `<text class="series" fill="%s" x="%s" y="%s">%s</text>`, e.c, svgNum(x1+8), svgNum(e.y+4), svgEsc(clip(e.name, 27)))
	}
	ny := bottom + axisH + 12
	for _, note := range p.Notes {
		fmt.Fprintf(&b, `<text class="note" x="4" y="%s">%s<title>%s</title></text>`, svgNum(ny), svgEsc(clip(note, noteChars)), svgEsc(note))
		ny += noteH
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// curveFacet describes one scale figure.
type curveFacet struct {
	axis, title, caption, yAxis string
	format                      func(float64) string
	ref                         float64
	refLabel                    string
	// y is a row's figure and its label; ok false leaves the point out
	// with the reason.
	y func(*Row) (float64, string, string)
}

func pctTick(v float64) string { return tickNum(v) + "%" }

func scaleFacets() []curveFacet {
	return []curveFacet{
		{
			axis:  ScaleNames,
			title: "Scale: names on one Locker",
			caption: fmt.Sprintf("%d goroutines share one Locker and cycle over 10, 1 000 and 10 000 names (each its own names "+
				"when there are enough), beside the strategy's floor with %d clients on the same names; each name is used once "+
				"before the measured time. The line is dlock's grants/s over the floor's, paired per round (%d rounds), higher is "+
				"better; the dashed line is the target (0.8 at 10 000 names).", ScaleClients, ScaleClients, scaleRounds),
			yAxis: "grants/s ÷ floor's", format: tickNum, ref: 0.8, refLabel: "target 0.8",
			y: func(r *Row) (float64, string, string) {
				if r.RateToFloor == nil {
					return 0, "", "no floor to compare with: " + perSec(r.GrantsPerSec)
				}
				return r.RateToFloor.Median, "×" + ratioNum(r.RateToFloor.Median) + " " + perSec(r.GrantsPerSec), ""
			},
		},
		{
			axis:  ScaleLeases,
			title: "Scale: leases held by one Locker",
			caption: fmt.Sprintf("10, 100 and 1 000 leases held at once by one Locker, kept alive by its keep-alive: the CPU "+
				"time of this process (getrusage) over a window with them held, minus the same window with the Locker idle, as a "+
				"share of one core, lower is better. The leases have a %v TTL, refreshed every %v: ten times as often as at the "+
				"default TTL (%v), whose cost is about a tenth of the line (the label's second figure). The dashed line is the "+
				"target at the default TTL, 1 %%.", ScaleLeaseTTL, ScaleLeaseTTL/3, "30s"),
			yAxis: "% of one core at the measured TTL", format: pctTick, ref: 0,
			y: func(r *Row) (float64, string, string) {
				if r.CorePct == nil {
					return 0, "", "not measured"
				}
				return max(*r.CorePct, 0), fmt.Sprintf("%.2f%% (%.2f%% at 30s)", *r.CorePct, *r.CorePctDefaultTTL), ""
			},
		},
		{
			axis:  ScaleWaiters,
			title: "Scale: waiters of one Locker on one name",
			caption: "1, 8 and 64 goroutines of one Locker contend on one name, each holding it 1 ms: grants/s, higher is " +
				"better (a perfect lock approaches 1 000/s less the handover). On Redis the label adds the requests per grant " +
				"(INFO commandstats; a script call is one request: report.csv's server_cmds_per_grant also counts the " +
				"commands the scripts run); the target is ≤ 3 requests per grant at 64 waiters.",
			yAxis: "grants/s", format: rateTick,
			y: func(r *Row) (float64, string, string) {
				l := perSec(r.GrantsPerSec)
				switch {
				case r.ServerReqsPerGrant >= 0:
					l += fmt.Sprintf(" %.1f req/grant", r.ServerReqsPerGrant)
				case r.ServerCmdsPerGrant >= 0:
					l += fmt.Sprintf(" %.1f cmd/grant", r.ServerCmdsPerGrant)
				}
				return r.GrantsPerSec, l, ""
			},
		},
	}
}

// scaleCharts builds the scale figures from the report's rows.
func (rep *Report) scaleCharts(colours map[string]string) []figure {
	var out []figure
	for _, f := range scaleFacets() {
		var fams []string
		byFam := map[string][]*Row{}
		for _, r := range rep.Rows {
			if r.Workload != Scale || r.Params["axis"] != f.axis {
				continue
			}
			if _, ok := byFam[r.Family]; !ok {
				fams = append(fams, r.Family)
			}
			byFam[r.Family] = append(byFam[r.Family], r)
		}
		if len(fams) == 0 {
			continue
		}
		slices.SortStableFunc(fams, func(a, b string) int { return cmp.Compare(familyRank(a), familyRank(b)) })
		fig := figure{ID: "scale-" + f.axis, Title: f.title, Caption: f.caption}
		for _, fam := range fams {
			rows := byFam[fam]
			var xs []int
			for _, r := range rows {
				if x := r.ScalePoint(); !slices.Contains(xs, x) {
					xs = append(xs, x)
				}
			}
			slices.Sort(xs)
			p := curvePanel{Title: fam, Axis: f.yAxis, Format: f.format, Ref: f.ref, RefLabel: f.refLabel}
			for _, x := range xs {
				p.X = append(p.X, groupDigits(x))
			}
			var order []string
			series := map[string]*curveSeries{}
			for _, r := range rows {
				i := slices.Index(xs, r.ScalePoint())
				s := series[r.Backend]
				if s == nil {
					s = &curveSeries{Name: r.Backend, Colour: colours[r.Backend], Y: make([]float64, len(xs)), Labels: make([]string, len(xs))}
					if s.Colour == "" {
						s.Colour = shade(r.Kind, len(order))
					}
					for j := range s.Y {
						s.Y[j] = math.NaN()
					}
					series[r.Backend] = s
					order = append(order, r.Backend)
				}
				if r.Skipped != "" {
					p.Notes = append(p.Notes, fmt.Sprintf("%s at %s skipped: %s", r.Backend, p.X[i], r.Skipped))
					continue
				}
				y, label, why := f.y(r)
				if why != "" {
					p.Notes = append(p.Notes, fmt.Sprintf("%s at %s: %s", r.Backend, p.X[i], why))
					continue
				}
				s.Y[i], s.Labels[i] = y, label
				if r.Note != "" {
					p.Notes = append(p.Notes, fmt.Sprintf("%s at %s: %s", r.Backend, p.X[i], r.Note))
				}
			}
			for _, n := range order {
				p.Series = append(p.Series, *series[n])
			}
			fig.Panels = append(fig.Panels, template.HTML(p.svg(fig.ID)))
		}
		fig.Key = template.HTML(`<div class="key">one line per dlock backend/strategy; hover a point for its figures</div>`)
		out = append(out, fig)
	}
	return out
}

// groupDigits prints 10000 as "10 000".
func groupDigits(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}
