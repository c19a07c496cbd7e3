package bench

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// The report's charts are inline SVG written here: no script, no network,
// they print, and every label is a <text> element of the page (a test, a
// screen reader or a search can read it). A figure is a set of small
// multiples (panels), one per server family; a panel is a horizontal bar
// chart whose bars carry their own names, so there is no legend to page.

// Panel geometry, in viewBox units (the SVG scales to its column's
// width). The columns for names, values and the right-hand figures are
// sized from their longest text.
const (
	svgWidth  = 720.0
	charW     = 7.2 // the mean advance of a 13-unit character
	barPitch  = 20.0
	barHeight = 13.0
	groupHead = 20.0
	titleH    = 26.0
	axisH     = 36.0
	noteH     = 16.0
)

// textW estimates the width of a label.
func textW(s string) float64 { return charW * float64(len([]rune(s))) }

// palette gives each Row.Kind one colour family, with distinct shades for
// the targets of one kind in a panel (first shade first).
var palette = map[string][]string{
	KindDlock: {"#2563b0", "#7fb0ea", "#163d70", "#4a90d9", "#a9c9ef"},
	KindPeer:  {"#e07000", "#f5b060", "#9a4a00", "#f08c2e", "#c86400"},
	KindFloor: {"#2e8b57", "#8fd0a5", "#1b5e38", "#55b27a", "#b8e2c6"},
	KindRTT:   {"#707070", "#b0b0b0", "#404040", "#909090", "#cfcfcf"},
}

// kindNames is how the key names each colour family.
var kindNames = []struct{ kind, name string }{
	{KindDlock, "dlock backend/strategy"},
	{KindPeer, "peer library"},
	{KindFloor, "hand-written floor"},
	{KindRTT, "raw round trip"},
}

const (
	inkColour  = "#222"
	wideColour = "#c62828" // an interval wider than ±WideInterval
	markColour = "#111"
)

// chartBar is one series of a panel: a target's figure with its interval.
type chartBar struct {
	Name string
	Kind string
	// Value is the bar's length; Lo and Hi its interval (no whisker when
	// Lo == Hi); Wide marks an interval wider than ±WideInterval.
	Value, Lo, Hi float64
	Wide          bool
	// Tail, when above Value, is drawn as a thin line from the bar's end
	// (a p99 beside a p50).
	Tail float64
	// Mark, when positive, is drawn as a tick across the bar (the ideal).
	Mark float64
	// Label is printed after the bar; Right in the right-hand column,
	// in red when RightWide.
	Label     string
	Right     string
	RightWide bool
}

// barGroup is a run of bars under one heading ("w=8").
type barGroup struct {
	Title string
	Bars  []chartBar
}

// barPanel is one small multiple.
type barPanel struct {
	Title  string
	Groups []barGroup
	// Axis names the x axis and its unit; Format prints a tick value.
	Axis   string
	Format func(float64) string
	// Max, when positive, fixes the axis end (Jain's index: 1).
	Max float64
	// RightHead heads the right-hand column (empty: no column).
	RightHead string
	// Colours gives a series its colour (missing: a shade of its kind's
	// family, in order of appearance).
	Colours map[string]string
	// Notes are printed under the panel (rows left out and why).
	Notes []string
}

// axisScale maps values to x on a linear or logarithmic axis.
type axisScale struct {
	lo, hi float64
	log    bool
	x0, x1 float64
}

func (s axisScale) x(v float64) float64 {
	if s.log {
		if v <= s.lo {
			return s.x0
		}
		v, lo, hi := math.Log10(v), math.Log10(s.lo), math.Log10(s.hi)
		return s.x0 + (s.x1-s.x0)*min(1, (v-lo)/(hi-lo))
	}
	if s.hi <= s.lo {
		return s.x0
	}
	return s.x0 + (s.x1-s.x0)*max(0, min(1, (v-s.lo)/(s.hi-s.lo)))
}

// ticks returns the axis tick values.
func (s axisScale) ticks() []float64 {
	var out []float64
	if s.log {
		for v := s.lo; v <= s.hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := niceStep(s.hi / 4)
	for v := 0.0; v <= s.hi*1.0001 && step > 0; v += step {
		out = append(out, v)
	}
	return out
}

// niceStep rounds up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// drawable reports whether v can be drawn.
func drawable(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 }

// logRange is how far apart a panel's values may lie before it switches to
// a logarithmic axis: beyond it, the short bars would be invisible.
const logRange = 40

// scaleFor chooses the axis of a panel from every value it draws.
func (p *barPanel) scaleFor(x0, x1 float64) axisScale {
	lo, hi := math.Inf(1), 0.0
	for _, g := range p.Groups {
		for _, b := range g.Bars {
			for _, v := range []float64{b.Value, b.Lo, b.Hi, b.Tail, b.Mark} {
				if drawable(v) {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
	}
	if p.Max > 0 {
		return axisScale{lo: 0, hi: p.Max, x0: x0, x1: x1}
	}
	if hi == 0 {
		return axisScale{lo: 0, hi: 1, x0: x0, x1: x1}
	}
	if hi/lo > logRange {
		return axisScale{lo: math.Pow(10, math.Floor(math.Log10(lo))), hi: math.Pow(10, math.Ceil(math.Log10(hi))), log: true, x0: x0, x1: x1}
	}
	step := niceStep(hi / 4)
	return axisScale{lo: 0, hi: math.Ceil(hi/step) * step, x0: x0, x1: x1}
}

// colourOf assigns each bar's colour: Colours, else its kind's family,
// one shade per distinct name of that kind in the panel.
func (p *barPanel) colourOf() map[string]string {
	out := map[string]string{}
	used := map[string]int{}
	for _, g := range p.Groups {
		for _, b := range g.Bars {
			if _, ok := out[b.Name]; ok {
				continue
			}
			if c, ok := p.Colours[b.Name]; ok {
				out[b.Name] = c
				continue
			}
			out[b.Name] = shade(b.Kind, used[b.Kind])
			used[b.Kind]++
		}
	}
	return out
}

// shade is the i-th shade of a kind's colour family.
func shade(kind string, i int) string {
	fam := palette[kind]
	if fam == nil {
		fam = palette[KindRTT]
	}
	return fam[i%len(fam)]
}

// columns sizes the name, value and right-hand columns from their texts.
func (p *barPanel) columns() (name, value, right float64) {
	name, value = 80, 60
	for _, g := range p.Groups {
		for _, b := range g.Bars {
			name = max(name, textW(b.Name)+14)
			value = max(value, textW(b.Label)+12)
			if b.Right != "" {
				right = max(right, textW(b.Right)+12)
			}
		}
	}
	if p.RightHead != "" {
		right = max(right, textW(p.RightHead)*0.95+8)
	}
	return min(name, 230), value, right
}

// noteChars is how many characters of a note fit across a panel.
const noteChars = 108

// clip shortens s to n characters, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// svgEsc escapes text for an SVG or HTML text node or attribute.
func svgEsc(s string) string { return html.EscapeString(s) }

// svgNum prints a coordinate.
func svgNum(v float64) string { return fmt.Sprintf("%.1f", v) }

// svg draws the panel. chart names the figure it belongs to (an
// attribute the page's test reads).
func (p *barPanel) svg(chart string) string {
	height := titleH + axisH + noteH*float64(len(p.Notes)) + 12
	for _, g := range p.Groups {
		if g.Title != "" {
			height += groupHead
		}
		height += barPitch * float64(len(g.Bars))
	}
	nameW, valueW, right := p.columns()
	sc := p.scaleFor(nameW, svgWidth-valueW-right)
	colour := p.colourOf()

	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="panel" data-chart="%s" data-panel="%s" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`,
		svgEsc(chart), svgEsc(p.Title), svgWidth, height, svgEsc(p.Title+": "+p.Axis))
	fmt.Fprintf(&b, `<text class="title" x="4" y="17">%s</text>`, svgEsc(p.Title))
	if p.RightHead != "" {
		fmt.Fprintf(&b, `<text class="head" x="%s" y="17" text-anchor="end">%s</text>`, svgNum(svgWidth-4), svgEsc(p.RightHead))
	}
	y := titleH
	top := y
	// Grid lines first, under the bars.
	ticks := sc.ticks()
	plotBottom := height - axisH - noteH*float64(len(p.Notes)) - 12
	for _, t := range ticks {
		fmt.Fprintf(&b, `<line class="grid" x1="%s" x2="%s" y1="%s" y2="%s"/>`, svgNum(sc.x(t)), svgNum(sc.x(t)), svgNum(top), svgNum(plotBottom))
	}
	for _, g := range p.Groups {
		if g.Title != "" {
			fmt.Fprintf(&b, `<text class="group" x="4" y="%s">%s</text>`, svgNum(y+14), svgEsc(g.Title))
			y += groupHead
		}
		for _, br := range g.Bars {
			p.drawBar(&b, br, sc, colour[br.Name], y, nameW, right > 0)
			y += barPitch
		}
	}
	// The axis.
	fmt.Fprintf(&b, `<line class="axis" x1="%s" x2="%s" y1="%s" y2="%s"/>`, svgNum(sc.x0), svgNum(sc.x1), svgNum(plotBottom), svgNum(plotBottom))
	for _, t := range ticks {
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="middle">%s</text>`, svgNum(sc.x(t)), svgNum(plotBottom+14), svgEsc(p.Format(t)))
	}
	axis := p.Axis
	if sc.log {
		axis += " (log scale)"
	}
	fmt.Fprintf(&b, `<text class="axisname" x="%s" y="%s" text-anchor="middle">%s</text>`, svgNum((sc.x0+sc.x1)/2), svgNum(plotBottom+30), svgEsc(axis))
	ny := plotBottom + axisH + 12
	for _, note := range p.Notes {
		fmt.Fprintf(&b, `<text class="note" x="4" y="%s">%s<title>%s</title></text>`, svgNum(ny), svgEsc(clip(note, noteChars)), svgEsc(note))
		ny += noteH
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// drawBar draws one bar: name, bar, whisker, tail, mark, labels.
func (p *barPanel) drawBar(b *strings.Builder, br chartBar, sc axisScale, fill string, y, nameW float64, right bool) {
	cy := y + barPitch/2
	fmt.Fprintf(b, `<text class="series" data-series="%s" data-kind="%s" x="%s" y="%s" text-anchor="end">%s</text>`,
		svgEsc(br.Name), svgEsc(br.Kind), svgNum(nameW-6), svgNum(cy+4), svgEsc(br.Name))
	end := sc.x0
	if drawable(br.Value) {
		end = sc.x(br.Value)
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`,
			svgNum(sc.x0), svgNum(cy-barHeight/2), svgNum(max(end-sc.x0, 1)), svgNum(barHeight), fill, svgEsc(br.Name+": "+br.Label))
	}
	if drawable(br.Tail) && br.Tail > br.Value {
		te := sc.x(br.Tail)
		fmt.Fprintf(b, `<line class="tail" x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`, svgNum(end), svgNum(te), svgNum(cy), svgNum(cy), fill)
		fmt.Fprintf(b, `<line class="tail" x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`, svgNum(te), svgNum(te), svgNum(cy-4), svgNum(cy+4), fill)
		end = max(end, te)
	}
	if drawable(br.Lo) && drawable(br.Hi) && br.Hi > br.Lo {
		cls, stroke := "whisker", inkColour
		if br.Wide {
			cls, stroke = "whisker wide", wideColour
		}
		lo, hi := sc.x(br.Lo), sc.x(br.Hi)
		fmt.Fprintf(b, `<path class="%s" stroke="%s" d="M%s %sV%sM%s %sH%sM%s %sV%s"/>`, cls, stroke,
			svgNum(lo), svgNum(cy-4), svgNum(cy+4), svgNum(lo), svgNum(cy), svgNum(hi), svgNum(hi), svgNum(cy-4), svgNum(cy+4))
		end = max(end, hi)
	}
	if drawable(br.Mark) {
		m := sc.x(br.Mark)
		fmt.Fprintf(b, `<line class="mark" x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`, svgNum(m), svgNum(m), svgNum(y), svgNum(y+barPitch), markColour)
		end = max(end, m)
	}
	cls := "value"
	if br.Wide {
		cls = "value wide"
	}
	fmt.Fprintf(b, `<text class="%s" x="%s" y="%s">%s</text>`, cls, svgNum(end+4), svgNum(cy+4), svgEsc(br.Label))
	if right && br.Right != "" {
		cls := "right"
		if br.RightWide {
			cls = "right wide"
		}
		fmt.Fprintf(b, `<text class="%s" x="%s" y="%s" text-anchor="end">%s</text>`, cls, svgNum(svgWidth-4), svgNum(cy+4), svgEsc(br.Right))
	}
}

// keyHTML is the colour key of a figure: the kinds that appear in it and
// the marks the figure uses (cover: the intervals' confidence), each a swatch (SVG, so that it prints) and
// its words (HTML, so that the key wraps on a narrow screen).
func keyHTML(kinds []string, marks []string, cover float64) string {
	var b strings.Builder
	item := func(w float64, swatch, text string) {
		fmt.Fprintf(&b, `<span class="keyitem"><svg width="%.0f" height="16" viewBox="0 0 %.0f 16" aria-hidden="true">%s</svg>%s</span>`,
			w, w, swatch, text)
	}
	b.WriteString(`<div class="key">`)
	for _, k := range kindNames {
		if !slices.Contains(kinds, k.kind) {
			continue
		}
		var sw strings.Builder
		for i, c := range palette[k.kind][:3] {
			fmt.Fprintf(&sw, `<rect x="%d" y="2" width="8" height="12" fill="%s"/>`, i*8, c)
		}
		item(24, sw.String(), svgEsc(k.name))
	}
	for _, m := range marks {
		switch m {
		case "whisker":
			item(18, fmt.Sprintf(`<path stroke="%s" d="M1 4V12M1 8H17M17 4V12"/>`, inkColour),
				fmt.Sprintf("%.0f %% interval of the median", 100*cover))
			item(18, fmt.Sprintf(`<path stroke="%s" d="M1 4V12M1 8H17M17 4V12"/>`, wideColour),
				fmt.Sprintf(`<span class="wide">wider than ±%.0f %%</span>`, WideInterval*100))
		case "mark":
			item(8, fmt.Sprintf(`<line stroke="%s" stroke-width="2.5" x1="4" x2="4" y1="0" y2="16"/>`, markColour),
				"ideal: a perfect lock on that server")
		case "tail":
			item(36, fmt.Sprintf(`<rect x="0" y="2" width="14" height="12" fill="%[1]s"/><path stroke="%[1]s" stroke-width="2" d="M14 8H35M35 4V12"/>`,
				palette[KindDlock][0]), "bar to p50, line on to p99")
		}
	}
	b.WriteString(`</div>`)
	return b.String()
}
