package bench

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// claimFamily is one side of a seed claim: a server family and what the
// claim calls it.
type claimFamily struct{ label, family string }

var (
	cache     = claimFamily{"cache (Redis)", "redis"}
	zookeeper = claimFamily{"ZooKeeper", "zookeeper"}
	mysql     = claimFamily{"MySQL", "mysql"}
)

// pairTally is how the strategies of two families compare, pair by pair,
// when the claim says the first is ahead.
type pairTally struct {
	a, b                  claimFamily
	holds, ties, reversed int
	tieWord               string   // what a pair neither side wins is: "within the noise"
	against               []string // the reversed pairs, "x beats y"
}

func (t pairTally) String() string {
	s := fmt.Sprintf("%s > %s holds for %d of %d strategy pairs", t.a.label, t.b.label, t.holds, t.holds+t.ties+t.reversed)
	if t.ties > 0 {
		s += fmt.Sprintf(", %d %s", t.ties, t.tieWord)
	}
	if t.reversed > 0 {
		s += fmt.Sprintf(", reversed for %d", t.reversed)
		const shown = 2
		s += " (" + strings.Join(t.against[:min(shown, len(t.against))], "; ")
		if len(t.against) > shown {
			s += "; …"
		}
		s += ")"
	}
	return s
}

// tally compares every strategy of a with every strategy of b.
func tally[T any](a, b claimFamily, xs, ys []T, better func(x, y T) bool, say func(x, y T) string, tieWord string) pairTally {
	t := pairTally{a: a, b: b, tieWord: tieWord}
	for _, x := range xs {
		for _, y := range ys {
			switch {
			case better(x, y):
				t.holds++
			case better(y, x):
				t.reversed++
				t.against = append(t.against, say(y, x))
			default:
				t.ties++
			}
		}
	}
	return t
}

// outcome answers a claim from its tallies: confirmed when every pair of
// strategies is in the claimed order, refuted when for some two families
// no pair is, and depends on strategy otherwise.
func outcome(ts []pairTally) string {
	if len(ts) == 0 {
		return NotMeasured
	}
	all := true
	for _, t := range ts {
		if t.holds == 0 {
			return Refuted
		}
		all = all && t.ties == 0 && t.reversed == 0
	}
	if all {
		return Confirmed
	}
	return Depends
}

// orderedPairs are the comparisons a ranking a > b > c makes.
func orderedPairs(fs []claimFamily) [][2]claimFamily {
	var out [][2]claimFamily
	for i := range fs {
		for j := i + 1; j < len(fs); j++ {
			out = append(out, [2]claimFamily{fs[i], fs[j]})
		}
	}
	return out
}

// claims answers the three seed claims.
func claims(rep *Report, safety []SafetyRow) []Claim {
	return []Claim{performanceClaim(rep), reliabilityClaim(rep, safety), easeClaim()}
}

// familyEntries returns the contenders of a family on one workload
// configuration, by the workload's metric.
func familyEntries(rep *Report, family, label string) []entry {
	var out []entry
	for _, r := range rep.Rows {
		if r.Label != label || r.Family != family || !contender(r) {
			continue
		}
		_, fig := metricOf(r.Workload)
		if e := fig(r); e.v > 0 {
			out = append(out, e)
		}
	}
	return out
}

// performanceClaim: cache (Redis) > ZooKeeper > MySQL, on the uncontended
// lock use and the handoff rate of every strategy of each.
func performanceClaim(rep *Report) Claim {
	c := Claim{Claim: "performance: cache (Redis) > ZooKeeper > MySQL"}
	order := []claimFamily{cache, zookeeper, mysql}
	var ts []pairTally
	var figs, missing []string
	for _, m := range []struct{ label, what string }{{Uncontended, "uncontended lock use"}, {SafetyHandoff, SafetyHandoff + " rate"}} {
		byFam := map[string][]entry{}
		var lacking []string
		for _, f := range order {
			if byFam[f.family] = familyEntries(rep, f.family, m.label); len(byFam[f.family]) == 0 {
				lacking = append(lacking, f.label)
			}
		}
		if len(lacking) > 0 {
			missing = append(missing, fmt.Sprintf("%s (no %s)", m.what, strings.Join(lacking, ", ")))
			continue
		}
		var parts, orders []string
		for _, f := range order {
			parts = append(parts, figures(byFam[f.family]))
		}
		for _, p := range orderedPairs(order) {
			t := tally(p[0], p[1], byFam[p[0].family], byFam[p[1].family], entry.better,
				func(x, y entry) string { return fmt.Sprintf("%s %s beats %s %s", x.name, fmtFig(x), y.name, fmtFig(y)) },
				"within the noise")
			ts = append(ts, t)
			orders = append(orders, t.String())
		}
		figs = append(figs, fmt.Sprintf("On %s: %s. %s", m.what, strings.Join(parts, "; "), strings.Join(orders, "; ")))
	}
	c.Answer = outcome(ts)
	if len(missing) > 0 {
		figs = append(figs, "Not measured: "+strings.Join(missing, "; "))
	}
	c.Figures = strings.Join(figs, ". ") + "."
	return c
}

// fmtFig is an entry's median with its unit, without the interval.
func fmtFig(e entry) string {
	if e.unit == "ns" {
		return fmtNs(e.v, true)
	}
	return fmtRate(e.v, true)
}

// facts are what the reliability claim compares: the guarantees a
// strategy declares and the violations the fault suite measured.
type facts struct {
	name    string
	fencing bool
	restart bool
	// crash is how long a dead holder's lock stays taken (the lease TTL
	// of the benchmark for the TTL-bound strategies).
	crash  time.Duration
	ttl    bool // crash is the lease TTL
	faults *int
}

func factsOf(name string, c *driver.Capabilities, faults *int) facts {
	f := facts{name: name, fencing: c.Fencing, restart: c.TokensSurviveRestart, crash: c.ReleaseOnCrash, faults: faults}
	if f.crash < 0 {
		f.crash, f.ttl = LeaseTTL, true
	}
	return f
}

// dominates reports whether x is at least as safe as y on every fact and
// safer on one: a partial order, so that one better fact never hides a
// worse one.
func dominates(x, y facts) bool {
	ge := []bool{x.fencing || !y.fencing, x.restart || !y.restart, x.crash <= y.crash}
	gt := []bool{x.fencing && !y.fencing, x.restart && !y.restart, x.crash < y.crash}
	if x.faults != nil && y.faults != nil {
		ge = append(ge, *x.faults <= *y.faults)
		gt = append(gt, *x.faults < *y.faults)
	}
	return !slices.Contains(ge, false) && slices.Contains(gt, true)
}

func (f facts) String() string {
	var parts []string
	if f.fencing {
		parts = append(parts, "fenced")
	} else {
		parts = append(parts, "no fencing")
	}
	if f.restart {
		parts = append(parts, "tokens survive a restart")
	} else {
		parts = append(parts, "tokens not kept across a restart")
	}
	switch {
	case f.crash == 0:
		parts = append(parts, "a crashed holder's lock freed at once")
	case f.ttl:
		parts = append(parts, fmt.Sprintf("a crashed holder's lock freed after the lease TTL (%v)", f.crash))
	default:
		parts = append(parts, fmt.Sprintf("a crashed holder's lock freed within %v", f.crash))
	}
	if f.faults != nil {
		parts = append(parts, fmt.Sprintf("%d fault violations", *f.faults))
	}
	return f.name + ": " + strings.Join(parts, ", ")
}

// reliabilityClaim: ZooKeeper > cache > MySQL, from the declared
// guarantees (fencing, tokens across a restart, how soon a crashed
// holder's lock is free) and the fault suite's violations.
func reliabilityClaim(rep *Report, safety []SafetyRow) Claim {
	c := Claim{Claim: "reliability: ZooKeeper > cache (Redis) > MySQL"}
	order := []claimFamily{zookeeper, cache, mysql}
	faults := map[string]*int{}
	for _, s := range safety {
		faults[s.Target] = s.FaultViolations
	}
	byFam := map[string][]facts{}
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		if r.Kind != KindDlock || r.Caps == nil || seen[r.Backend] {
			continue
		}
		seen[r.Backend] = true
		byFam[r.Family] = append(byFam[r.Family], factsOf(r.Backend, r.Caps, faults[r.Backend]))
	}
	var lacking []string
	for _, f := range order {
		if len(byFam[f.family]) == 0 {
			lacking = append(lacking, f.label)
		}
	}
	if len(lacking) > 0 {
		c.Answer = NotMeasured
		c.Figures = "No strategy of " + joinAnd(lacking) + " was measured with its capabilities."
		return c
	}
	var ts []pairTally
	for _, p := range orderedPairs(order) {
		ts = append(ts, tally(p[0], p[1], byFam[p[0].family], byFam[p[1].family], dominates,
			func(x, y facts) string { return x.name + " over " + y.name }, "with neither ahead on every fact"))
	}
	c.Answer = outcome(ts)
	var figs []string
	for _, t := range ts {
		figs = append(figs, t.String())
	}
	var all []string
	for _, f := range order {
		for _, x := range byFam[f.family] {
			all = append(all, x.String())
		}
	}
	figs = append(figs, fmt.Sprintf("A strategy is ahead when it is at least as safe on every fact and safer on one "+
		"(fencing token, tokens kept across a server restart, how soon a crashed holder's lock is free with a %v lease, "+
		"violations under faults when the fault suite ran); no fact measures how a failover to an asynchronous replica "+
		"can lose a Redis lock. Facts: %s", LeaseTTL, strings.Join(all, "; ")))
	c.Figures = strings.Join(figs, ". ") + "."
	return c
}

// easeClaim: ease of use is not something a benchmark measures; the
// figures are the facts a team weighs.
func easeClaim() Claim {
	return Claim{
		Claim:  "ease of use: MySQL > cache (Redis) > ZooKeeper",
		Answer: NotMeasured,
		Figures: "Not measured by this benchmark; which servers a team already runs is theirs to weigh. What each needs: " +
			"MySQL or PostgreSQL: a URL to a database, in which the driver creates its lock table and token counter (migrate=true); " +
			"Redis: a URL to a server, with appendonly yes and appendfsync always for tokens to survive a restart, and no allkeys-* eviction policy (refused); " +
			"ZooKeeper: a zk:// URL naming an ensemble of three or five JVM servers to run (quorum, snapshots and transaction logs to purge, session timeouts to tune).",
	}
}

// paragraph is the text a team could paste into a design document: the
// recommended default and when to choose something else, with this run's
// figures.
func paragraph(rep *Report, safety []SafetyRow) string {
	caps := map[string]*driver.Capabilities{}
	for _, r := range rep.Rows {
		if r.Kind == KindDlock && r.Caps != nil {
			caps[r.Backend] = r.Caps
		}
	}
	faults := map[string]*int{}
	for _, s := range safety {
		faults[s.Target] = s.FaultViolations
	}
	var use, safe, fair, atOnce []entry
	handoff := map[string]entry{}
	for _, r := range rep.Rows {
		if !contender(r) {
			continue
		}
		switch {
		case r.Workload == Uncontended && !r.IsFresh():
			e := useEntry(r)
			if e.v <= 0 {
				continue
			}
			use = append(use, e)
			c, f := caps[r.Backend], faults[r.Backend]
			// A row whose server does not fsync (etcd-nofsync) may lose
			// acknowledged writes, tokens included, in a crash: the
			// driver's TokensSurviveRestart assumes a durable server.
			if c == nil || !c.Fencing || !c.TokensSurviveRestart || f != nil && *f > 0 || noFsync(r.Backend) {
				continue
			}
			safe = append(safe, e)
			if c.ReleaseOnCrash == 0 {
				atOnce = append(atOnce, e)
			}
		case r.Label == SafetyHandoff:
			e := rateEntry(r)
			handoff[r.Backend] = e
			if c := caps[r.Backend]; c != nil && c.Fair && c.Fencing {
				fair = append(fair, e)
			}
		}
	}
	if len(use) == 0 {
		return ""
	}
	var b strings.Builder
	fastW, _, _ := rank(slices.Clone(use))
	fastest := fastW[0]
	safeW, _, _ := rank(safe)
	preferSafer(safeW, caps, handoff)
	if len(safeW) == 0 {
		fmt.Fprintf(&b, "No strategy in this run declared fenced tokens that survive a server restart, so none is recommended on safety; "+
			"the fastest uncontended was %s at %s per lock use. ", joinAnd(names(fastW)), fastest)
	} else {
		d := safeW[0]
		fmt.Fprintf(&b, "We use %s by default: its fencing tokens strictly increase across holders and survive a server restart", d.name)
		if c := caps[d.name]; c != nil {
			fmt.Fprintf(&b, ", a crashed holder's lock is freed %s, and %s", crashPhrase(c),
				map[string]string{"queue": "waiters queue on the server", "notify": "waiters are woken by a notification", "polling": "waiters poll"}[waiters(c.Wait)])
		}
		fmt.Fprintf(&b, ". In this run one uncontended lock use (acquire + release) cost %s", d)
		if h, ok := handoff[d.name]; ok {
			fmt.Fprintf(&b, " and one hot lock handed off %s (8 waiters, 1 ms hold)", h)
		}
		if len(safeW) > 1 {
			fmt.Fprintf(&b, "; %s cannot be told apart from it (%s)", joinAnd(names(safeW[1:])), figures(safeW[1:]))
		}
		b.WriteString(". ")
		if fastest.better(d) {
			fmt.Fprintf(&b, "%s is faster (%s, %s) but gives up %s: choose it when latency matters more. ",
				fastest.name, fastest, ahead(fastest, d), strings.Join(givesUp(caps[fastest.name]), " and "))
		}
		if c := caps[d.name]; c != nil && c.ReleaseOnCrash != 0 && len(atOnce) > 0 {
			w, _, _ := rank(atOnce)
			fmt.Fprintf(&b, "When a crashed holder's lock must be free at once, choose %s (the lock lives in its connection; %s per use). ", w[0].name, w[0])
		}
	}
	if len(fair) > 0 {
		w, _, _ := rank(fair)
		if c := caps[w[0].name]; c != nil && (len(safeW) == 0 || w[0].name != safeW[0].name) {
			fmt.Fprintf(&b, "When waiters must be served in arrival order, choose %s (a fair queue; %s on a hot lock). ", w[0].name, w[0])
		}
	}
	var where []string
	if rep.Host != "" {
		where = append(where, rep.Host)
	}
	if rep.NumCPU > 0 {
		where = append(where, fmt.Sprintf("%d CPUs", rep.NumCPU))
	}
	if rep.GoVersion != "" {
		where = append(where, rep.GoVersion)
	}
	if !rep.Started.IsZero() {
		where = append(where, rep.Started.Format("2006-01-02"))
	}
	if rep.Quick {
		where = append(where, "a quick run")
	}
	b.WriteString("Measured by dlockbench")
	if len(where) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(where, ", "))
	}
	b.WriteString(": the absolute figures are this machine's; the ratios between backends are what carry over.")
	return b.String()
}

// preferSafer orders strategies that cannot be told apart on speed by
// how soon a crashed holder's lock is free, then by the handoff rate: of
// two that cost the same, the default is the one that gives more.
func preferSafer(tied []entry, caps map[string]*driver.Capabilities, handoff map[string]entry) {
	crash := func(e entry) time.Duration {
		c := caps[e.name]
		if c == nil || c.ReleaseOnCrash < 0 {
			return LeaseTTL
		}
		return c.ReleaseOnCrash
	}
	slices.SortStableFunc(tied, func(a, b entry) int {
		if c := cmp.Compare(crash(a), crash(b)); c != 0 {
			return c
		}
		return cmp.Compare(handoff[b.name].v, handoff[a.name].v)
	})
}

// crashPhrase says when a crashed holder's lock is freed, in a sentence.
func crashPhrase(c *driver.Capabilities) string {
	switch {
	case c.ReleaseOnCrash == 0:
		return "at once (the lock lives in its connection)"
	case c.ReleaseOnCrash < 0:
		return "when its lease runs out"
	case c.SessionBound:
		return fmt.Sprintf("when its session expires (%v)", c.ReleaseOnCrash)
	}
	return fmt.Sprintf("within %v", c.ReleaseOnCrash)
}

// givesUp lists what a strategy does not promise.
func givesUp(c *driver.Capabilities) []string {
	if c == nil {
		return []string{"guarantees it did not declare"}
	}
	var out []string
	if !c.Fencing {
		out = append(out, "fencing tokens")
	}
	if !c.TokensSurviveRestart {
		s := "tokens that survive a server restart"
		if c.Backend == "redis" && c.Fencing {
			s += " (unless its server runs appendonly yes with appendfsync always)"
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		out = append(out, "nothing the safety table shows")
	}
	return out
}
