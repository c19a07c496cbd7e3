package bench

import (
	"cmp"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/stats"
)

// figure is one chart of the HTML report: small multiples, one panel per
// server family, under one title, caption and colour key.
type figure struct {
	ID      string
	Title   string
	Caption string
	Key     template.HTML
	Panels  []template.HTML
}

// facet describes a figure: which rows it draws, how a row becomes a bar,
// and how the bars of a panel are grouped and sorted.
type facet struct {
	id, title, caption string
	// rows selects the figure's rows, skipped ones included (they are
	// named under their panel with the reason).
	rows func(*Row) bool
	// group heads the run of bars a row belongs to ("" for none).
	group func(*Row) string
	// toBar draws a row, or says why it is left out.
	toBar func(*Row) (chartBar, string)
	// desc sorts higher values first (higher is better); by is the sort
	// key (nil: the bar's value).
	desc bool
	by   func(chartBar) float64
	// axis, format, max and rightHead are the panels' (see barPanel).
	axis      string
	format    func(float64) string
	max       float64
	rightHead string
	// marks are the marks the key explains: "whisker", "mark", "tail".
	marks []string
}

// familyOrder is the order of the panels: the in-process reference first,
// then the servers as the tables list them.
var familyOrder = []string{"memory", "redis", "zookeeper", "etcd", "postgres", "mysql"}

func familyRank(f string) int {
	if i := slices.Index(familyOrder, f); i >= 0 {
		return i
	}
	return len(familyOrder)
}

// draw builds the figure from the report's rows; ok is false when the
// report has none of its rows. A panel whose rows were all left out still
// appears, saying why.
func (f facet) draw(rows []*Row, colours map[string]string, cover float64) (figure, bool) {
	var fams []string
	byFam := map[string][]*Row{}
	for _, r := range rows {
		if !f.rows(r) {
			continue
		}
		if _, ok := byFam[r.Family]; !ok {
			fams = append(fams, r.Family)
		}
		byFam[r.Family] = append(byFam[r.Family], r)
	}
	slices.SortStableFunc(fams, func(a, b string) int { return cmp.Compare(familyRank(a), familyRank(b)) })
	fig := figure{ID: f.id, Title: f.title, Caption: f.caption}
	var kinds []string
	for _, fam := range fams {
		p := barPanel{Title: fam, Axis: f.axis, Format: f.format, Max: f.max, Colours: colours}
		drawn := 0
		for _, r := range byFam[fam] {
			if r.Skipped != "" {
				p.Notes = append(p.Notes, fmt.Sprintf("%s skipped: %s", r.Backend, r.Skipped))
				continue
			}
			b, why := f.toBar(r)
			if why != "" {
				p.Notes = append(p.Notes, fmt.Sprintf("%s left out: %s", r.Backend, why))
				continue
			}
			b.Name, b.Kind = r.Backend, r.Kind
			if b.Right != "" {
				p.RightHead = f.rightHead
			}
			title := ""
			if f.group != nil {
				title = f.group(r)
			}
			i := slices.IndexFunc(p.Groups, func(g barGroup) bool { return g.Title == title })
			if i < 0 {
				p.Groups = append(p.Groups, barGroup{Title: title})
				i = len(p.Groups) - 1
			}
			p.Groups[i].Bars = append(p.Groups[i].Bars, b)
			if !slices.Contains(kinds, r.Kind) {
				kinds = append(kinds, r.Kind)
			}
			drawn++
		}
		if drawn == 0 && len(p.Notes) == 0 {
			continue
		}
		for _, g := range p.Groups {
			f.sort(g.Bars)
		}
		fig.Panels = append(fig.Panels, template.HTML(p.svg(f.id)))
	}
	if len(fig.Panels) == 0 {
		return figure{}, false
	}
	fig.Key = template.HTML(keyHTML(kinds, f.marks, cover))
	return fig, true
}

// sort orders a group's bars by their figure, then by name.
func (f facet) sort(bars []chartBar) {
	key := f.by
	if key == nil {
		key = func(b chartBar) float64 { return b.Value }
	}
	slices.SortStableFunc(bars, func(a, b chartBar) int {
		c := cmp.Compare(key(a), key(b))
		if f.desc {
			c = -c
		}
		return cmp.Or(c, strings.Compare(a.Name, b.Name))
	})
}

// charts builds the figures of the HTML report, in page order; a figure
// whose workloads did not run is left out.
func (rep *Report) charts() []figure {
	facets := []facet{uncontendedFacet(), freshFacet()}
	for _, hold := range rep.handoffHolds() {
		facets = append(facets, handoffRateFacet(hold), handoffLatencyFacet(hold))
	}
	facets = append(facets, fairnessFacet(), manyKeysFacet(), openLoopFacet(), semaphoreFacet())
	colours, cover := rep.seriesColours(), rep.coverage()
	var out []figure
	for _, f := range facets {
		if fig, ok := f.draw(rep.Rows, colours, cover); ok {
			out = append(out, fig)
		}
	}
	return append(out, rep.scaleCharts(colours)...)
}

// seriesColours gives every target one colour on the whole page: its
// kind's family, the shades in the order the report lists the targets of
// that kind on that server family.
func (rep *Report) seriesColours() map[string]string {
	out := map[string]string{}
	used := map[[2]string]int{}
	for _, r := range rep.Rows {
		if _, ok := out[r.Backend]; ok {
			continue
		}
		k := [2]string{r.Family, r.Kind}
		out[r.Backend] = shade(r.Kind, used[k])
		used[k]++
	}
	return out
}

// coverage is the confidence the report's intervals reach: the lowest
// over the figures measured in rounds (with few rounds it is below
// Confidence, and the page says so), Confidence when none was.
func (rep *Report) coverage() float64 {
	cover := 1.0
	for _, r := range rep.Rows {
		for _, iv := range []*stats.Interval{r.Use, r.Rate} {
			if iv != nil && iv.Rounds > 1 {
				cover = min(cover, iv.Confidence)
			}
		}
	}
	if cover == 1 {
		return Confidence
	}
	return cover
}

// handoffHolds lists the hold times of the handoff workloads, in run order.
func (rep *Report) handoffHolds() []string {
	var out []string
	for _, r := range rep.Rows {
		if h := fmt.Sprint(r.Params["hold"]); r.Workload == Handoff && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// contends selects the rows that take part in contended workloads.
func contends(r *Row) bool { return r.Kind == KindDlock || r.Kind == KindPeer }

// intervalBar is a bar for a figure measured per round: its median and
// interval, printed with show, marked when wide.
func intervalBar(iv *stats.Interval, show func(float64) string) (chartBar, string) {
	if iv == nil {
		return chartBar{}, "not measured in rounds (no interval)"
	}
	b := chartBar{Value: iv.Median, Lo: iv.Lo, Hi: iv.Hi, Label: show(iv.Median)}
	if iv.Rounds > 1 && iv.Wide(WideInterval) {
		b.Wide = true
		b.Label += fmt.Sprintf(" ±%.0f%%", math.Ceil(iv.HalfWidth()*100))
	}
	return b, ""
}

// ratioLabel prints a ratio with its interval: "×1.85 (1.71–2.03)".
func ratioLabel(iv *stats.Interval) (string, bool) {
	if iv == nil || iv.Median <= 0 {
		return "", false
	}
	s := "×" + ratioNum(iv.Median)
	if iv.Hi > iv.Lo {
		s += " (" + ratioNum(iv.Lo) + "–" + ratioNum(iv.Hi) + ")"
	}
	return s, iv.Rounds > 1 && iv.Wide(WideInterval)
}

// ratioNum prints a ratio with two decimals, or two significant digits
// when it is small (a peer that sleeps between tries: ×0.0011).
func ratioNum(v float64) string {
	if v < 0.1 {
		return fmt.Sprintf("%.2g", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// tickNum prints v with at most three significant digits and no trailing
// zeros: 1.5, 100, 0.25.
func tickNum(v float64) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	e := int(math.Floor(math.Log10(v)))
	p := math.Pow(10, float64(e-2))
	r := math.Round(v/p) * p
	out := strconv.FormatFloat(r, 'f', max(0, 2-e), 64)
	if strings.Contains(out, ".") {
		out = strings.TrimRight(strings.TrimRight(out, "0"), ".")
	}
	return out
}

// durTick prints an axis tick in nanoseconds: 0, 500ns, 1µs, 2.5ms.
func durTick(v float64) string {
	switch {
	case v <= 0:
		return "0"
	case v < 1e3:
		return tickNum(v) + "ns"
	case v < 1e6:
		return tickNum(v/1e3) + "µs"
	case v < 1e9:
		return tickNum(v/1e6) + "ms"
	}
	return tickNum(v/1e9) + "s"
}

// rateTick prints an axis tick in grants/s: 0, 500, 5k, 1.5M.
func rateTick(v float64) string {
	switch {
	case v <= 0:
		return "0"
	case v < 1e3:
		return tickNum(v)
	case v < 1e6:
		return tickNum(v/1e3) + "k"
	}
	return tickNum(v/1e6) + "M"
}

// perSec prints a rate label: exact below 100 000 grants/s, then short.
func perSec(v float64) string {
	if v >= 1e5 {
		return rateTick(v) + "/s"
	}
	return rate(v) + "/s"
}

func durLabel(v float64) string { return dur(int64(v)) }

func uncontendedFacet() facet {
	return facet{
		id:    "uncontended",
		title: "Uncontended: the cost of one lock use",
		caption: "One client, acquire then release in a loop on one name. Each bar is the lock use (acquire p50 + release p50), " +
			"median over the rounds with its interval; beside each server's raw round trip (rtt) and each strategy's " +
			"hand-written floor, which gives the same guarantees. The right-hand column is the lock use over the floor's, paired per round.",
		rows:      func(r *Row) bool { return r.Workload == Uncontended && !r.IsFresh() },
		toBar:     func(r *Row) (chartBar, string) { return useBar(r) },
		axis:      "lock use (acquire + release p50), lower is better",
		format:    durTick,
		rightHead: "×floor (interval)",
		marks:     []string{"whisker"},
	}
}

func freshFacet() facet {
	f := uncontendedFacet()
	f.id = "uncontended-fresh"
	f.title = "Uncontended on fresh names: the cost of a name's first use"
	f.caption = "As above, but every operation locks a name never used before (orders/42, orders/43…), for dlock, its floor and " +
		"the peers alike: what the first use of a name costs (a subscription, an inserted row, a parent node) is in the bar. " +
		"The right-hand column is the lock use over the floor's on fresh names, paired per round."
	f.rows = func(r *Row) bool { return r.IsFresh() }
	return f
}

func useBar(r *Row) (chartBar, string) {
	b, why := intervalBar(r.Use, durLabel)
	if why != "" {
		return b, why
	}
	if r.Kind == KindDlock || r.Kind == KindPeer {
		b.Right, b.RightWide = ratioLabel(r.ToFloor)
	}
	return b, ""
}

func waitersGroup(r *Row) string { return fmt.Sprintf("%v waiters", r.Params["clients"]) }

func handoffRateFacet(hold string) facet {
	return facet{
		id:    "handoff-rate-hold-" + hold,
		title: "Handoff: grants per second on one hot name, hold " + hold,
		caption: "Waiters on one name; each holds the lock for " + hold + ", releases, works 2 ms and asks again. " +
			"Bars: grants/s, median over the rounds with its interval. The black tick is the ideal: the rate a perfect lock " +
			"would reach on that server, from the measured hold and the shortest handover the server allows in these " +
			"conditions: the floor's release plus one round trip, each timed in the same round by a client that first " +
			"sleeps the hold, as the holders and waiters here do. After a millisecond idle the server and the client wake " +
			"cold (a Redis release takes about three times its tight-loop round trip), so a handover timed in a tight loop " +
			"would put the ideal out of reach. Higher is better.",
		rows: func(r *Row) bool {
			return r.Workload == Handoff && contends(r) && fmt.Sprint(r.Params["hold"]) == hold
		},
		group:     waitersGroup,
		toBar:     idealRateBar,
		desc:      true,
		axis:      "grants/s, higher is better",
		format:    rateTick,
		rightHead: "×ideal",
		marks:     []string{"whisker", "mark"},
	}
}

// idealRateBar is a rate bar with the ideal as its tick and the rate over
// the ideal on its right (handoff, semaphore).
func idealRateBar(r *Row) (chartBar, string) {
	b, why := intervalBar(r.Rate, perSec)
	b.Mark = Med(r.Ideal)
	b.Right, b.RightWide = ratioLabel(r.ToIdeal)
	return b, why
}

// tailBar is a latency bar: p50 with a line to p99.
func tailBar(p50, p99 int64, none string) (chartBar, string) {
	if p50 <= 0 {
		return chartBar{}, none
	}
	return chartBar{Value: float64(p50), Tail: float64(p99), Label: dur(p50) + " · " + dur(p99)}, ""
}

func handoffLatencyFacet(hold string) facet {
	return facet{
		id:    "handoff-latency-hold-" + hold,
		title: "Handoff latency, hold " + hold,
		caption: "From the holder's release call to the next holder's acquire returning (one monotonic clock), for every grant " +
			"whose acquirer was already waiting: p50 as the bar, the line runs on to p99. A long line is waiters sleeping through a release.",
		rows: func(r *Row) bool {
			return r.Workload == Handoff && contends(r) && fmt.Sprint(r.Params["hold"]) == hold
		},
		group:  waitersGroup,
		toBar:  func(r *Row) (chartBar, string) { return tailBar(r.HandoffP50, r.HandoffP99, "no handoff measured") },
		axis:   "release to next grant, p50 and p99, lower is better",
		format: durTick,
		marks:  []string{"tail"},
	}
}

func fairnessFacet() facet {
	return facet{
		id:    "fairness",
		title: "Fairness: Jain's index over the grants per client",
		caption: "16 clients on one name, each asking again at once after its release: 1.0 means every client got the same share; " +
			"a lock that lets the releaser barge in scores lower. The right-hand column is the longest any client waited.",
		rows: func(r *Row) bool { return r.Workload == Fairness && contends(r) },
		toBar: func(r *Row) (chartBar, string) {
			if r.Grants == 0 {
				return chartBar{}, "no grants"
			}
			return chartBar{Value: r.Jain, Label: fmt.Sprintf("%.3f", r.Jain), Right: "max wait " + dur(r.MaxWait)}, ""
		},
		desc:      true,
		axis:      "Jain's index (1 = equal shares), higher is better",
		format:    func(v float64) string { return fmt.Sprintf("%.2g", v) },
		max:       1,
		rightHead: "longest wait",
	}
}

func manyKeysFacet() facet {
	return facet{
		id:    "manykeys",
		title: "Many keys: throughput with little contention",
		caption: "4× and 16× GOMAXPROCS clients, 10 000 names chosen uniformly, closed loop. Grants/s, median over the rounds with " +
			"its interval; the right-hand column is the rate over the best peer library's on the same server, round by round.",
		rows:  func(r *Row) bool { return r.Workload == ManyKeys && contends(r) },
		group: func(r *Row) string { return fmt.Sprintf("%v clients", r.Params["clients"]) },
		toBar: func(r *Row) (chartBar, string) {
			b, why := intervalBar(r.Rate, perSec)
			if r.Kind == KindDlock {
				b.Right, b.RightWide = ratioLabel(r.ToPeer)
				if b.Right != "" {
					b.Right += " " + r.Peer
				}
			}
			return b, why
		},
		desc:      true,
		axis:      "grants/s, higher is better",
		format:    rateTick,
		rightHead: "×best peer",
		marks:     []string{"whisker"},
	}
}

func openLoopFacet() facet {
	return facet{
		id:    "openloop",
		title: "Open loop: latency under a steady offered load",
		caption: "Poisson arrivals at a fraction of each target's own many-keys capacity; latency counted from the intended start " +
			"whenever the client was still busy then, so a stalled server is not hidden (no coordinated omission). " +
			"Bar p50, line to p99; sorted by p99. The right-hand column is what was served of what was offered.",
		rows: func(r *Row) bool { return r.Workload == OpenLoop && contends(r) },
		group: func(r *Row) string {
			return fmt.Sprintf("offered %.0f %% of capacity", 100*toFloat(r.Params["load"]))
		},
		toBar: func(r *Row) (chartBar, string) {
			b, why := tailBar(r.P50, r.P99, "no grants")
			b.Right = perSec(r.GrantsPerSec) + " of " + perSec(toFloat(r.Params["rate_per_sec"]))
			return b, why
		},
		by:        func(b chartBar) float64 { return max(b.Tail, b.Value) },
		axis:      "acquire latency from the intended start, p50 and p99, lower is better",
		format:    durTick,
		rightHead: "served of offered",
		marks:     []string{"tail"},
	}
}

// semaphoreFacet draws the semaphore workload: each dlock target beside
// its backend's semaphore floor.
func semaphoreFacet() facet {
	return facet{
		id:    "semaphore",
		title: "Semaphore: grants per second with more clients than permits",
		caption: fmt.Sprintf("%d clients (a Locker or connection each) on one counting semaphore of %d permits, each holding a permit 1 ms "+
			"and asking again at once; each target beside its backend's hand-written semaphore floor (same guarantees: at most N, "+
			"fenced, expiring or session-bound), the two alternating slice by slice. Bars: grants/s, median over the rounds with its "+
			"interval. The black tick is the ideal, N/hold: every permit always held, handed over in no time. The right-hand column is "+
			"the rate over the ideal, paired per round. Higher is better.", SemClients, SemPermits),
		rows:      func(r *Row) bool { return r.Workload == Semaphore },
		toBar:     idealRateBar,
		desc:      true,
		axis:      "grants/s, higher is better",
		format:    rateTick,
		rightHead: "×ideal",
		marks:     []string{"whisker", "mark"},
	}
}
