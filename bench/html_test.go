package bench

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"html"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/stats"
)

// chromium finds a headless browser, or skips (fails with
// DLOCK_REQUIRE_BACKENDS=1) when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found; run scripts/install-backends.sh --chromium (apt-get install chromium)"
	if os.Getenv("DLOCK_REQUIRE_BACKENDS") == "1" {
		t.Fatal(msg + " (DLOCK_REQUIRE_BACKENDS=1: missing tools fail)")
	}
	t.Skip(msg)
	return ""
}

func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// synthTarget is one target of the synthetic report.
type synthTarget struct {
	name, family, kind string
	useUs              float64 // uncontended lock use, µs
}

// synthTargets are the targets of a full run, with realistic names and
// rough figures, every kind and family present.
var synthTargets = []synthTarget{
	{"memory", "memory", KindDlock, 1.2},
	{"redis", "redis", KindDlock, 95},
	{"redsync", "redis", KindPeer, 120},
	{"redsync tuned", "redis", KindPeer, 118},
	{"redislock", "redis", KindPeer, 70},
	{"redislock tuned", "redis", KindPeer, 72},
	{"floor redis", "redis", KindFloor, 52},
	{"floor redis unfenced", "redis", KindFloor, 41},
	{"rtt redis", "redis", KindRTT, 19},
	{"zookeeper", "zookeeper", KindDlock, 420},
	{"zookeeper/basic", "zookeeper", KindDlock, 390},
	{"zk.Lock", "zookeeper", KindPeer, 610},
	{"floor zookeeper", "zookeeper", KindFloor, 300},
	{"rtt zookeeper", "zookeeper", KindRTT, 45},
	{"postgres/forupdate", "postgres", KindDlock, 310},
	{"postgres/version", "postgres", KindDlock, 260},
	{"postgres/advisory", "postgres", KindDlock, 140},
	{"floor postgres/forupdate", "postgres", KindFloor, 190},
	{"floor postgres/version", "postgres", KindFloor, 150},
	{"floor postgres/advisory", "postgres", KindFloor, 80},
	{"rtt postgres", "postgres", KindRTT, 35},
	{"mysql/forupdate", "mysql", KindDlock, 1900},
	{"mysql/version", "mysql", KindDlock, 720},
	{"mysql/getlock", "mysql", KindDlock, 260},
	{"floor mysql/forupdate", "mysql", KindFloor, 330},
	{"floor mysql/version", "mysql", KindFloor, 280},
	{"floor mysql/getlock", "mysql", KindFloor, 120},
	{"rtt mysql", "mysql", KindRTT, 40},
}

// synthJitter is a stable pseudo-random factor in [1-spread, 1+spread] for a key.
func synthJitter(key string, spread float64) float64 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return 1 + spread*(2*float64(h.Sum32()%1000)/999-1)
}

// synthInterval is a synthetic interval of n rounds around m, ±half of it.
func synthInterval(m, half float64) *stats.Interval {
	return &stats.Interval{Median: m, Lo: m * (1 - half), Hi: m * (1 + half*0.8), Rounds: 9, Confidence: 0.96}
}

// synthReport is a report of a full run on every family, built by hand
// (the page test needs many targets, and servers it need not start): every
// kind of row and workload, intervals narrow and wide, one skipped row,
// one row without an interval, and a verdict.
func synthReport() *Report {
	rep := &Report{Started: time.Date(2025, 11, 25, 10, 0, 0, 0, time.UTC), DurationS: "14m2s", GoVersion: "go1.26",
		GOMAXPROCS: 2, NumCPU: 2, Host: "test", Procs: 1, Rounds: 9,
		Load: &Load{Avg1Start: 0.4, Avg1End: 1.9, BusyPct: 71, OtherPct: 3}}
	for _, fam := range []string{"redis", "zookeeper", "postgres", "mysql"} {
		rep.Servers = append(rep.Servers, &Server{ID: fam, Backend: fam, Addr: "127.0.0.1:1", Origin: "testenv",
			Settings: map[string]string{"a": "b"}})
	}
	floorOf := map[string]string{}
	for _, t := range synthTargets {
		if t.kind == KindFloor {
			floorOf[strings.TrimPrefix(t.name, "floor ")] = t.name
		}
	}
	use := map[string]float64{}
	for _, t := range synthTargets {
		use[t.name] = t.useUs * 1e3
	}
	row := func(t synthTarget, w Workload) *Row {
		return &Row{Backend: t.name, Family: t.family, Server: t.family, Kind: t.kind, Workload: w.Kind, Label: w.Label(),
			Params: w.Params(), Grants: 1000, ServerCmdsPerGrant: -1, ServerCPUPerGrantNs: -1}
	}
	work := 2 * time.Millisecond
	for _, w := range []Workload{
		{Kind: Uncontended, Clients: 1, Names: 1},
		{Kind: ManyKeys, Clients: 8, Names: 10000}, {Kind: ManyKeys, Clients: 32, Names: 10000},
		{Kind: Handoff, Clients: 8, Names: 1, Work: work}, {Kind: Handoff, Clients: 32, Names: 1, Work: work},
		{Kind: Handoff, Clients: 8, Names: 1, Hold: time.Millisecond, Work: work},
		{Kind: Handoff, Clients: 32, Names: 1, Hold: time.Millisecond, Work: work},
		{Kind: Fairness, Clients: 16, Names: 1, Hold: time.Millisecond},
		{Kind: OpenLoop, Clients: 8, Names: 10000, Load: 0.5, Rate: 4000},
	} {
		for _, t := range synthTargets {
			if w.Kind != Uncontended && (t.kind == KindFloor || t.kind == KindRTT) {
				continue
			}
			r := row(t, w)
			j := synthJitter(t.name+w.Label(), 0.3)
			u := use[t.name] * j
			switch {
			case t.name == "mysql/version" && w.Kind == ManyKeys:
				r.Skipped, r.Grants = "deadlock storm: every attempt failed", 0
			case w.Kind == Uncontended:
				if t.name != "rtt mysql" { // a row measured without rounds
					r.Use = synthInterval(u, 0.03+0.2*(j-0.7))
				}
				r.P50, r.ReleaseP50 = int64(u*0.6), int64(u*0.4)
				f := floorOf[t.name]
				if f == "" && (t.kind == KindPeer || t.name == "zookeeper/basic") {
					f = "floor " + t.family
				}
				if f != "" {
					r.Floor, r.ToFloor = f, synthInterval(u/use[f], 0.04*j)
				}
			case w.Kind == ManyKeys || w.Kind == OpenLoop:
				r.Rate = synthInterval(float64(w.Clients)*1e9/u, 0.05*j)
				r.GrantsPerSec = r.Rate.Median
				r.P50, r.P99 = int64(u), int64(u*6*j)
				r.Peer = "redsync"
			case w.Kind == Handoff || w.Kind == Fairness:
				ideal := 1e9 / (float64(w.Hold) + 2*use["rtt "+t.family] + 1)
				if t.family == "memory" {
					ideal = 1e9 / (float64(w.Hold) + 500)
				}
				got := ideal * 0.7 / j
				if strings.HasPrefix(t.name, "redsync") && !strings.HasSuffix(t.name, "tuned") {
					got = 8 // sleeps 50–250 ms between tries
				}
				r.Rate, r.Ideal, r.ToIdeal = synthInterval(got, 0.04), synthInterval(ideal, 0.02), synthInterval(got/ideal, 0.05)
				r.GrantsPerSec = got
				r.HandoffP50, r.HandoffP99 = int64(1e9/got*0.3), int64(1e9/got*2*j)
				r.Jain, r.MaxWait = min(1, 0.99/j), int64(40e6*j)
			}
			rep.Rows = append(rep.Rows, r)
		}
	}
	rep.Rows = append(rep.Rows, &Row{Backend: "redlock", Family: "redis", Kind: KindDlock, Workload: Uncontended,
		Label: Uncontended, Skipped: "driver for redlock:// not built into this binary yet", ServerCmdsPerGrant: -1, ServerCPUPerGrantNs: -1})
	v := &Verdict{
		Workloads: []WorkloadVerdict{
			{Label: Uncontended, Metric: "lock use p50, lower is better", Winners: []string{"redis", "postgres/advisory"}, Tie: true,
				Text: "redis (95µs) and postgres/advisory (140µs) overlap."},
			{Label: "handoff w=8 hold=1ms", Metric: "grants/s, higher is better", Winners: []string{"redis"}, RunnersUp: []string{"zookeeper"},
				Text: "redis leads."},
		},
		Claims: []Claim{
			{Claim: "performance: cache > ZooKeeper > MySQL", Answer: "depends on strategy", Figures: "mysql/getlock 260µs < zookeeper 420µs"},
			{Claim: "reliability: ZooKeeper > cache > MySQL", Answer: "confirmed", Figures: "fencing everywhere"},
			{Claim: "ease: MySQL > cache > ZooKeeper", Answer: "refuted", Figures: "one URL each"},
		},
		Paragraph: "Choose redis for speed and zookeeper for safety.",
		Caveats:   []string{"Absolute figures are machine-specific; ratios carry over."},
	}
	zero := 0
	for _, t := range synthTargets {
		if t.kind == KindDlock {
			v.Safety = append(v.Safety, SafetyRow{Target: t.name, Fencing: "yes", SurvivesRestart: "no", Fair: "FIFO",
				Waiters: "woken", FreedAfterCrash: "after TTL", LostLease: "yes", UseNs: t.useUs * 1e3, HandoffPerSec: 900})
		}
	}
	v.Safety[1].FaultViolations = &zero
	rep.Verdict = v
	return rep
}

// htmlPageFigures is, per figure of the page, the rows of a report it must
// name: written here from the workloads, independently of charts.go.
func htmlPageFigures(rep *Report) map[string][]*Row {
	out := map[string][]*Row{}
	for _, r := range rep.Rows {
		contends := r.Kind == KindDlock || r.Kind == KindPeer
		switch {
		case r.Workload == Uncontended:
			out["uncontended"] = append(out["uncontended"], r)
		case r.Workload == Handoff && contends:
			hold := fmt.Sprint(r.Params["hold"])
			out["handoff-rate-hold-"+hold] = append(out["handoff-rate-hold-"+hold], r)
			out["handoff-latency-hold-"+hold] = append(out["handoff-latency-hold-"+hold], r)
		case r.Workload == Fairness && contends:
			out["fairness"] = append(out["fairness"], r)
		case r.Workload == ManyKeys && contends:
			out["manykeys"] = append(out["manykeys"], r)
		case r.Workload == OpenLoop && contends:
			out["openloop"] = append(out["openloop"], r)
		}
	}
	return out
}

// htmlProbeJS runs in the page after layout and writes what only a browser
// knows into the DOM: how wide the page is against the window, and the
// smallest rendered font of any chart label.
const htmlProbeJS = `<script>
(function () {
  var min = 1e9;
  document.querySelectorAll('figure svg text').forEach(function (t) {
    var svg = t.ownerSVGElement, vb = svg.viewBox.baseVal;
    if (!vb || !vb.width) return;
    var px = parseFloat(getComputedStyle(t).fontSize) * svg.getBoundingClientRect().width / vb.width;
    if (px < min) min = px;
  });
  document.body.setAttribute('data-probe-overflow', document.documentElement.scrollWidth - window.innerWidth);
  document.body.setAttribute('data-probe-min-font', min.toFixed(2));
  document.body.setAttribute('data-probe-width', window.innerWidth);
})();
</script>`

var (
	figureRe  = regexp.MustCompile(`(?s)<figure\b[^>]*\bdata-chart="([^"]+)"[^>]*>(.*?)</figure>`)
	seriesRe  = regexp.MustCompile(`<text\b[^>]*\bclass="series"[^>]*>([^<]*)</text>`)
	noteRe    = regexp.MustCompile(`<text\b[^>]*\bclass="note"[^>]*>([^<]*)<`)
	panelRe   = regexp.MustCompile(`<svg\b[^>]*\bclass="panel"`)
	barRectRe = regexp.MustCompile(`<rect\b[^>]*\bwidth="([0-9.]+)"`)
	probeRe   = regexp.MustCompile(`data-probe-([a-z-]+)="(-?[0-9.]+)"`)
	// scrollLegendRe finds an ECharts legend of type "scroll" (paged).
	scrollLegendRe = regexp.MustCompile(`"?type"?\s*:\s*"scroll"`)
)

// htmlCheckPage checks a page's DOM, as Chromium rendered it at one width,
// against the report it was written from, and returns what is wrong.
func htmlCheckPage(dom string, rep *Report) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }

	// The verdict comes first, then the safety table, the claims, the
	// paragraph, the run, the charts, the servers, the tables.
	order := []string{`id="verdict"`, `id="safety"`, `id="claims"`, `id="paragraph"`, `id="run"`, `id="charts"`, `id="servers"`, `id="figures"`}
	last := -1
	for _, id := range order {
		i := strings.Index(dom, id)
		if i < 0 {
			bad("the page has no section %s", id)
			continue
		}
		if i < last {
			bad("section %s comes before the one that should precede it (order %v)", id, order)
		}
		last = i
	}
	if v, s := strings.Index(dom, `id="verdict"`), strings.Index(dom, "<svg"); v < 0 || s >= 0 && s < v {
		bad("a chart comes before the verdict")
	}
	if v, tbl := strings.Index(dom, `id="verdict"`), strings.Index(dom, "<table"); v < 0 || tbl >= 0 && tbl < v {
		bad("a table comes before the verdict")
	}
	safety := htmlSection(dom, "safety")
	for _, s := range rep.Verdict.Safety {
		if !strings.Contains(safety, ">"+html.EscapeString(s.Target)+"<") {
			bad("the safety table does not name %s", s.Target)
		}
	}
	if rep.Verdict.Safety[0].FaultViolations == nil && !strings.Contains(safety, "not run") {
		bad(`the safety table does not say "not run" for fault violations that were not measured`)
	}

	// No legend that pages: no canvas (its text is not in the DOM), no
	// scrolling legend, no pager.
	for _, s := range []string{"<canvas", "pager", "pageIcons"} {
		if strings.Contains(dom, s) {
			bad("the page holds %q: a chart whose legend pages or whose names are not in the DOM", s)
		}
	}
	if m := scrollLegendRe.FindString(dom); m != "" {
		bad("the page holds %q: a legend that pages", m)
	}

	figs := map[string]string{}
	for _, m := range figureRe.FindAllStringSubmatch(dom, -1) {
		figs[m[1]] = m[2]
	}
	for id, rows := range htmlPageFigures(rep) {
		body, ok := figs[id]
		if !ok {
			bad("figure %s is missing", id)
			continue
		}
		named := map[string]bool{}
		for _, m := range seriesRe.FindAllStringSubmatch(body, -1) {
			named[html.UnescapeString(m[1])] = true
		}
		notes := ""
		for _, m := range noteRe.FindAllStringSubmatch(body, -1) {
			notes += html.UnescapeString(m[1]) + "\n"
		}
		for _, r := range rows {
			switch {
			case r.Skipped != "" || r.Use == nil && r.Workload == Uncontended:
				if !strings.Contains(notes, r.Backend+" ") {
					bad("figure %s neither draws nor names %s (skipped or without an interval)", id, r.Backend)
				}
			case !named[r.Backend]:
				bad("figure %s does not name series %s on the chart", id, r.Backend)
			}
		}
		if n := len(panelRe.FindAllString(body, -1)); n < 2 {
			bad("figure %s has %d panels, want one per family", id, n)
		}
		bars := 0
		for _, m := range barRectRe.FindAllStringSubmatch(body, -1) {
			if w, _ := strconv.ParseFloat(m[1], 64); w >= 1 {
				bars++
			}
		}
		if bars < len(named) {
			bad("figure %s draws %d bars for %d series: a chart without content", id, bars, len(named))
		}
	}

	probe := map[string]float64{}
	for _, m := range probeRe.FindAllStringSubmatch(dom, -1) {
		probe[m[1]], _ = strconv.ParseFloat(m[2], 64)
	}
	if len(probe) < 3 {
		bad("the layout probe did not run: %v", probe)
	} else {
		if probe["overflow"] > 0 {
			bad("at %v px the page is %v px wider than the window", probe["width"], probe["overflow"])
		}
		if probe["min-font"] < 9.5 {
			bad("at %v px the smallest chart label renders at %.1f px: unreadable", probe["width"], probe["min-font"])
		}
	}
	return errs
}

// htmlSection returns the HTML of the section with that id.
func htmlSection(dom, id string) string {
	i := strings.Index(dom, `<section id="`+id+`"`)
	if i < 0 {
		return ""
	}
	j := strings.Index(dom[i:], "</section>")
	if j < 0 {
		return dom[i:]
	}
	return dom[i : i+j]
}

// TestHTMLPageReadsInHeadlessChromium renders index.html of a report
// with every kind of target in headless Chromium, at 1400 and 800 px
// wide, and checks from the DOM that the verdict and the safety table
// come first, that no legend pages, that every chart names every series
// of its data and has content, that the page fits the window with
// readable labels, and that screenshots at both widths are not blank.
func TestHTMLPageReadsInHeadlessChromium(t *testing.T) {
	bin := chromium(t)
	rep := synthReport()
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if len(page) > 400<<10 {
		t.Errorf("index.html is %d KiB: too big to be a page of charts", len(page)>>10)
	}
	probed := filepath.Join(dir, "probed.html")
	if err := os.WriteFile(probed, bytes.Replace(page, []byte("</body>"), []byte(htmlProbeJS+"</body>"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, width := range []int{1400, 800} {
		t.Run(strconv.Itoa(width), func(t *testing.T) {
			size := fmt.Sprintf("--window-size=%d,3000", width)
			dom := string(runChromium(t, bin, "--virtual-time-budget=2000", size, "--dump-dom", "file://"+probed))
			for _, e := range htmlCheckPage(dom, rep) {
				t.Error(e)
			}
			shot := filepath.Join(dir, fmt.Sprintf("shot-%d.png", width))
			runChromium(t, bin, "--virtual-time-budget=2000", fmt.Sprintf("--window-size=%d,5000", width),
				"--screenshot="+shot, "file://"+filepath.Join(dir, "index.html"))
			img := htmlReadPNG(t, shot)
			if got := img.Bounds().Dx(); got != width {
				t.Errorf("the screenshot is %d px wide, want %d", got, width)
			}
			if n := colours(img); n < 50 {
				t.Errorf("the screenshot at %d px has %d distinct colours: blank or unstyled (charts draw many)", width, n)
			}
			if keep := os.Getenv("DLOCKBENCH_KEEP_SCREENSHOT"); keep != "" {
				b, _ := os.ReadFile(shot)
				os.WriteFile(fmt.Sprintf("%s-%d.png", strings.TrimSuffix(keep, ".png"), width), b, 0o644)
			}
		})
	}
}

// TestHTMLPageCheckCatchesABadPage feeds htmlCheckPage pages that break each
// rule, so that the Chromium test can fail.
func TestHTMLPageCheckCatchesABadPage(t *testing.T) {
	rep := synthReport()
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	good := strings.Replace(buf.String(), "</body>", `<body data-probe-overflow="0" data-probe-min-font="12" data-probe-width="800"></body>`, 1)
	if errs := htmlCheckPage(good, rep); len(errs) > 0 {
		t.Fatalf("a good page fails the check: %v", errs)
	}
	cases := []struct{ name, old, new, want string }{
		{"paged legend", "</body>", `<script>var o = {"legend":{"show":true,"type":"scroll"}}</script></body>`, "a legend that pages"},
		{"series not named", `>zookeeper/basic</text>`, `>zk basic</text>`, "does not name series zookeeper/basic"},
		{"charts before the verdict", `<section id="verdict">`, `<svg></svg><section id="verdict">`, "chart comes before the verdict"},
		{"safety after the claims", `<section id="safety">`, `<section id="safetyx">`, "no section id=\"safety\""},
		{"overflow", `data-probe-overflow="0"`, `data-probe-overflow="120"`, "wider than the window"},
		{"tiny labels", `data-probe-min-font="12"`, `data-probe-min-font="7"`, "unreadable"},
	}
	for _, c := range cases {
		page := strings.Replace(good, c.old, c.new, -1)
		if page == good {
			t.Fatalf("%s: the page has no %q to break", c.name, c.old)
		}
		errs := htmlCheckPage(page, rep)
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, c.want) }) {
			t.Errorf("%s: check returned %v, want an error with %q", c.name, errs, c.want)
		}
	}
}

func htmlReadPNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// colours counts the distinct colours of an image (up to 10 000).
func colours(img image.Image) int {
	seen := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			if len(seen) >= 10000 {
				return len(seen)
			}
		}
	}
	return len(seen)
}
