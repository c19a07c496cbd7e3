package bench

import (
	"bytes"
	"html"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/stats"
)

var (
	svgSeriesRe = regexp.MustCompile(`<text class="series" data-series="([^"]*)"`)
	svgNumberRe = regexp.MustCompile(`(?:x|y|x1|x2|y1|y2|width|height)="([^"]*)"`)
)

// svgSeriesOrder returns the series names of an SVG in drawing order.
func svgSeriesOrder(svg string) []string {
	var out []string
	for _, m := range svgSeriesRe.FindAllStringSubmatch(svg, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// svgUseRow is an uncontended row of the redis family.
func svgUseRow(name, kind string, use *stats.Interval) *Row {
	return &Row{Backend: name, Family: "redis", Kind: kind, Workload: Uncontended, Label: Uncontended, Grants: 10, Use: use}
}

func TestSVGUncontendedSortedWithWhiskersAndNotes(t *testing.T) {
	wide := &stats.Interval{Median: 100e3, Lo: 75e3, Hi: 130e3, Rounds: 9}
	rows := []*Row{
		svgUseRow("b", KindDlock, &stats.Interval{Median: 300e3, Lo: 290e3, Hi: 310e3, Rounds: 9}),
		svgUseRow("a", KindPeer, wide),
		svgUseRow("c", KindFloor, &stats.Interval{Median: 200e3, Lo: 195e3, Hi: 205e3, Rounds: 9}),
		svgUseRow("rtt x", KindRTT, &stats.Interval{Median: 50e3, Lo: 49e3, Hi: 51e3, Rounds: 9}),
		svgUseRow("d", KindDlock, nil),
		{Backend: "e", Family: "redis", Kind: KindDlock, Workload: Uncontended, Label: Uncontended, Skipped: "no driver"},
		{Backend: "other", Family: "mysql", Kind: KindDlock, Workload: Handoff, Label: "handoff w=8 hold=0s"},
	}
	rows[0].ToFloor = &stats.Interval{Median: 1.5, Lo: 1.45, Hi: 1.56, Rounds: 9}
	fig, ok := uncontendedFacet().draw(rows, nil, Confidence)
	if !ok || len(fig.Panels) != 1 {
		t.Fatalf("got %d panels (ok=%v), want one: the redis family", len(fig.Panels), ok)
	}
	svg := string(fig.Panels[0])
	if got, want := svgSeriesOrder(svg), []string{"rtt x", "a", "c", "b"}; !slices.Equal(got, want) {
		t.Errorf("bars in order %v, want %v (sorted by lock use, lower first)", got, want)
	}
	if n := strings.Count(svg, `class="whisker`); n != 4 {
		t.Errorf("%d whiskers, want one per bar (4)", n)
	}
	if n := strings.Count(svg, `class="whisker wide"`); n != 1 {
		t.Errorf("%d wide whiskers, want 1 (a: -25 %%/+30 %%)", n)
	}
	if !strings.Contains(svg, `class="value wide"`) || !strings.Contains(svg, "±30%") {
		t.Error("the wide interval is not marked beside its bar (±30%)")
	}
	if !strings.Contains(svg, "×1.50 (1.45–1.56)") {
		t.Error("the ×floor ratio with its interval is not beside b's bar")
	}
	for _, note := range []string{"d left out: not measured", "e skipped: no driver"} {
		if !strings.Contains(svg, note) {
			t.Errorf("the panel does not say %q", note)
		}
	}
	if strings.Contains(svg, "other") {
		t.Error("a row of another workload was drawn")
	}
}

func TestSVGHandoffDrawsTheIdealAndSortsHigherFirst(t *testing.T) {
	var rows []*Row
	for i, name := range []string{"slow", "fast", "mid"} {
		v := []float64{100, 900, 500}[i]
		rows = append(rows, &Row{Backend: name, Family: "zookeeper", Kind: KindDlock, Workload: Handoff,
			Label: "handoff w=8 hold=1ms", Params: map[string]any{"clients": 8, "hold": "1ms"}, Grants: 10,
			Rate:  &stats.Interval{Median: v, Lo: v * 0.98, Hi: v * 1.02, Rounds: 9},
			Ideal: &stats.Interval{Median: 950, Lo: 940, Hi: 960, Rounds: 9}})
	}
	fig, ok := handoffRateFacet("1ms").draw(rows, nil, Confidence)
	if !ok {
		t.Fatal("no figure")
	}
	svg := string(fig.Panels[0])
	if got, want := svgSeriesOrder(svg), []string{"fast", "mid", "slow"}; !slices.Equal(got, want) {
		t.Errorf("bars in order %v, want %v (higher rate first)", got, want)
	}
	if n := strings.Count(svg, `class="mark"`); n != 3 {
		t.Errorf("%d ideal marks, want one per bar (3)", n)
	}
	if !strings.Contains(svg, "8 waiters") {
		t.Error("the group of 8 waiters has no heading")
	}
	if !strings.Contains(string(fig.Key), "ideal") {
		t.Error("the key does not explain the ideal mark")
	}
}

func TestSVGLogAxisOnlyWhenValuesSpanDecades(t *testing.T) {
	panel := func(vs ...float64) string {
		p := barPanel{Title: "t", Axis: "x", Format: rateTick}
		g := barGroup{}
		for i, v := range vs {
			g.Bars = append(g.Bars, chartBar{Name: string(rune('a' + i)), Kind: KindDlock, Value: v})
		}
		p.Groups = []barGroup{g}
		return p.svg("test")
	}
	if s := panel(8, 24000); !strings.Contains(s, "(log scale)") || !strings.Contains(s, ">10<") || !strings.Contains(s, ">100k<") {
		t.Errorf("8 and 24 000 grants/s: want a log axis with ticks 10 … 100k:\n%s", s)
	}
	if s := panel(300, 900); strings.Contains(s, "log scale") || !strings.Contains(s, ">0<") {
		t.Errorf("300 and 900 grants/s: want a linear axis from 0:\n%s", s)
	}
}

func TestSVGBadNumbersDrawNoBrokenCoordinates(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	p := barPanel{Title: "t", Axis: "x", Format: durTick, Groups: []barGroup{{Bars: []chartBar{
		{Name: "nan", Kind: KindDlock, Value: nan, Lo: nan, Hi: inf, Mark: nan, Tail: inf},
		{Name: "neg", Kind: KindPeer, Value: -1, Lo: -2, Hi: -0.5},
		{Name: "zero", Kind: KindFloor},
		{Name: "inf", Kind: KindRTT, Value: inf},
	}}}}
	svg := p.svg("test")
	for _, m := range svgNumberRe.FindAllStringSubmatch(svg, -1) {
		if strings.Contains(m[1], "NaN") || strings.Contains(m[1], "Inf") {
			t.Fatalf("a coordinate is %q", m[0])
		}
	}
	if got := svgSeriesOrder(svg); len(got) != 4 {
		t.Errorf("named %v, want all four series named even without a figure", got)
	}
}

func TestSVGEscapesNames(t *testing.T) {
	rows := []*Row{svgUseRow(`<script>x&"y</script>`, KindDlock, &stats.Interval{Median: 1, Lo: 1, Hi: 1, Rounds: 1})}
	fig, _ := uncontendedFacet().draw(rows, nil, Confidence)
	if s := string(fig.Panels[0]); strings.Contains(s, "<script>") || !strings.Contains(s, "&lt;script&gt;x&amp;&#34;y") {
		t.Errorf("a name is not escaped:\n%s", s)
	}
}

// TestChartColoursOneFamilyPerKind checks that every target keeps one
// colour on the page, from its kind's family, distinct from the other
// targets of its server family.
func TestChartColoursOneFamilyPerKind(t *testing.T) {
	rep := synthReport()
	colours := rep.seriesColours()
	byFam := map[string]map[string]string{}
	for _, r := range rep.Rows {
		c := colours[r.Backend]
		if !slices.Contains(palette[r.Kind], c) {
			t.Errorf("%s (%s) has colour %s, not one of its kind's family", r.Backend, r.Kind, c)
		}
		if byFam[r.Family] == nil {
			byFam[r.Family] = map[string]string{}
		}
		if other, ok := byFam[r.Family][c]; ok && other != r.Backend {
			t.Errorf("%s and %s share colour %s in the %s panels", other, r.Backend, c, r.Family)
		}
		byFam[r.Family][c] = r.Backend
	}
	for k, fam := range palette {
		for i := range fam {
			for j := range i {
				if fam[i] == fam[j] {
					t.Errorf("the %s family repeats %s", k, fam[i])
				}
			}
		}
	}
}

func TestChartTickAndLabelFormats(t *testing.T) {
	cases := []struct{ got, want string }{
		{durTick(0), "0"}, {durTick(500), "500ns"}, {durTick(1500), "1.5µs"}, {durTick(2.5e6), "2.5ms"},
		{durTick(1e9), "1s"}, {durTick(999.6e3), "1000µs"}, {rateTick(15000), "15k"}, {rateTick(1.5e6), "1.5M"},
		{rateTick(10), "10"}, {perSec(1406335), "1.41M/s"}, {perSec(1.15e6), "1.15M/s"}, {rateTick(1.5e3), "1.5k"}, {durTick(0.25e6), "250µs"}, {perSec(9484.4), "9484/s"}, {ratioNum(0.00031), "0.00031"},
		{ratioNum(1.234), "1.23"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestHTMLPageIsSmallAndOffline: no script, nothing fetched, no megabyte
// of inlined library.
func TestHTMLPageIsSmallAndOffline(t *testing.T) {
	var buf bytes.Buffer
	if err := synthReport().WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if len(page) > 300<<10 {
		t.Errorf("index.html is %d KiB, want under 300", len(page)>>10)
	}
	for _, s := range []string{"<script", "http://", "https://", "<link"} {
		if strings.Contains(page, s) {
			t.Errorf("index.html holds %q: it must open offline, without scripts", s)
		}
	}
}

// TestHTMLSaysCoverageAndLoad: with three rounds an interval covers 75 %,
// not 95 %, and a busy machine is called busy.
func TestHTMLSaysCoverageAndLoad(t *testing.T) {
	rep := synthReport()
	for _, r := range rep.Rows {
		if r.Use != nil {
			r.Use.Rounds, r.Use.Confidence = 3, 0.75
		}
	}
	rep.Load.OtherPct = 65
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, want := range []string{"75 % interval of the median", "with its 75 % interval", "was not quiet"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not say %q", want)
		}
	}
	if strings.Contains(page, "95 % interval") {
		t.Error("the page claims 95 % intervals from three rounds")
	}
}
