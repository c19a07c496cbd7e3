package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/stats"
)

// The capabilities the synthetic rows declare: the shapes of the real
// drivers' (redis, zookeeper's fair recipe, the SQL strategies), written
// out so that each test says which facts it decides on.
var (
	capsRedis     = &driver.Capabilities{Backend: "redis", Fencing: true, Wait: driver.WaitNotify, ReleaseOnCrash: driver.ReleaseAfterTTL}
	capsRedlock   = &driver.Capabilities{Backend: "redis", Wait: driver.WaitNotify, ReleaseOnCrash: driver.ReleaseAfterTTL}
	capsZK        = &driver.Capabilities{Backend: "zookeeper", Fencing: true, TokensSurviveRestart: true, Fair: true, Wait: driver.WaitQueue, SessionBound: true, ReleaseOnCrash: 4 * time.Second}
	capsForUpdate = &driver.Capabilities{Backend: "mysql", Fencing: true, TokensSurviveRestart: true, Wait: driver.WaitQueue}
	capsVersion   = &driver.Capabilities{Backend: "mysql", Fencing: true, TokensSurviveRestart: true, Wait: driver.WaitPoll, ReleaseOnCrash: driver.ReleaseAfterTTL}
)

// around returns five rounds spread ±spread around v.
func around(v, spread float64) []float64 {
	return []float64{v * (1 - spread), v * (1 - spread/2), v, v * (1 + spread/2), v * (1 + spread)}
}

// dlockRow is a measured dlock row of one workload configuration.
func dlockRow(name, label string, caps *driver.Capabilities) *Row {
	family, _, _ := strings.Cut(name, "/")
	kind, _, _ := strings.Cut(label, " ")
	return &Row{Backend: name, Family: family, Kind: KindDlock, Workload: kind, Label: label, Caps: caps, Grants: 1000}
}

// useRow is an uncontended row whose lock use is ns ± spread per round.
func useRow(name string, caps *driver.Capabilities, ns, spread float64) *Row {
	r := dlockRow(name, Uncontended, caps)
	r.Use = stats.MedianCI(around(ns, spread), Confidence)
	r.P50, r.ReleaseP50 = int64(ns/2), int64(ns/2)
	return r
}

// rateRow is a contended row whose rate is perSec ± spread per round.
func rateRow(name, label string, caps *driver.Capabilities, perSec, spread float64) *Row {
	r := dlockRow(name, label, caps)
	r.Rate = stats.MedianCI(around(perSec, spread), Confidence)
	r.GrantsPerSec = r.Rate.Median
	return r
}

func workload(t *testing.T, v *Verdict, label string) WorkloadVerdict {
	t.Helper()
	for _, w := range v.Workloads {
		if w.Label == label {
			return w
		}
	}
	t.Fatalf("no verdict for %q in %+v", label, v.Workloads)
	return WorkloadVerdict{}
}

func TestDecideCallsAClearWinner(t *testing.T) {
	rep := &Report{Rows: []*Row{
		useRow("zookeeper", capsZK, 600e3, 0.05),
		useRow("redis", capsRedis, 100e3, 0.05),
		useRow("postgres/advisory", capsForUpdate, 200e3, 0.05),
		rateRow("redis", SafetyHandoff, capsRedis, 500, 0.05),
		rateRow("zookeeper", SafetyHandoff, capsZK, 800, 0.05),
	}}
	v := Decide(rep)
	w := workload(t, v, Uncontended)
	if w.Tie || !slices.Equal(w.Winners, []string{"redis"}) || len(w.RunnersUp) != 0 {
		t.Errorf("uncontended: winners %v tie %v runners-up %v, want redis alone", w.Winners, w.Tie, w.RunnersUp)
	}
	if !strings.Contains(w.Text, "redis wins at 100 µs [95.0, 105]") || !strings.Contains(w.Text, "×2.00 ahead") {
		t.Errorf("text lacks the winner's figure with its interval and lead: %s", w.Text)
	}
	h := workload(t, v, SafetyHandoff)
	if h.Tie || !slices.Equal(h.Winners, []string{"zookeeper"}) {
		t.Errorf("handoff (higher is better): winners %v, want zookeeper", h.Winners)
	}
}

func TestDecideCallsATieWhenIntervalsOverlap(t *testing.T) {
	rep := &Report{Rows: []*Row{
		useRow("redis", capsRedis, 188e3, 0.06),
		useRow("postgres/advisory", capsForUpdate, 182e3, 0.06),
		useRow("mysql/getlock", capsForUpdate, 209e3, 0.06), // overlaps redis, not postgres
		useRow("zookeeper", capsZK, 610e3, 0.05),
	}}
	w := workload(t, Decide(rep), Uncontended)
	if !w.Tie || !slices.Equal(w.Winners, []string{"postgres/advisory", "redis"}) {
		t.Errorf("winners %v tie %v, want postgres/advisory and redis tied", w.Winners, w.Tie)
	}
	if !slices.Equal(w.RunnersUp, []string{"mysql/getlock"}) {
		t.Errorf("runners-up %v, want mysql/getlock (within redis's interval, not the best's)", w.RunnersUp)
	}
	if !strings.HasPrefix(w.Text, "postgres/advisory and redis tie: postgres/advisory 182 µs [171, 193], redis 188 µs") {
		t.Errorf("text: %s", w.Text)
	}
}

func TestDecideOpenLoopUsesAMargin(t *testing.T) {
	row := func(name string, p99 int64) *Row {
		r := dlockRow(name, "openloop 50%", capsRedis)
		r.P99 = p99
		return r
	}
	v := Decide(&Report{Rows: []*Row{row("redis", 100_000), row("postgres/advisory", 108_000), row("zookeeper", 150_000)}})
	w := workload(t, v, "openloop 50%")
	if !w.Tie || !slices.Equal(w.Winners, []string{"redis", "postgres/advisory"}) {
		t.Errorf("p99s within 10 %%: winners %v tie %v, want a tie", w.Winners, w.Tie)
	}
	if !strings.Contains(w.Metric, "no interval") {
		t.Errorf("metric does not say the p99 has no interval: %s", w.Metric)
	}
	v = Decide(&Report{Rows: []*Row{row("redis", 100_000), row("zookeeper", 150_000)}})
	if w := workload(t, v, "openloop 50%"); w.Tie || !slices.Equal(w.Winners, []string{"redis"}) {
		t.Errorf("p99s 50 %% apart: winners %v tie %v, want redis", w.Winners, w.Tie)
	}
}

// TestDecideOpenLoopRanksTheRoundsP99s: the open loop is ranked by the
// median of its rounds' p99s with their interval, as every other
// workload by its intervals: a merged p99 has none, and two runs of one
// tree called a different winner each (postgres/version, then redlock).
func TestDecideOpenLoopRanksTheRoundsP99s(t *testing.T) {
	row := func(name string, p99s ...float64) *Row {
		r := dlockRow(name, "openloop 50%", capsRedis)
		r.RoundP99 = stats.MedianCI(p99s, Confidence)
		r.P99 = int64(r.RoundP99.Median * 0.8) // the merged p99 must not decide
		return r
	}
	rep := &Report{Rows: []*Row{
		row("redis", 100e3, 90e3, 130e3, 95e3, 105e3, 110e3),
		row("postgres/advisory", 120e3, 140e3, 125e3, 160e3, 150e3, 135e3),
		row("zookeeper", 300e3, 280e3, 320e3, 310e3, 290e3, 305e3),
	}}
	w := workload(t, Decide(rep), "openloop 50%")
	if !w.Tie || !slices.Equal(w.Winners, []string{"redis", "postgres/advisory"}) {
		t.Errorf("overlapping rounds' p99s: winners %v tie %v, want redis and postgres/advisory tied", w.Winners, w.Tie)
	}
	if strings.Contains(w.Metric, "no interval") || !strings.Contains(w.Metric, "rounds") {
		t.Errorf("metric %q: want the median of the rounds' p99s, with an interval", w.Metric)
	}
	rep.Rows = rep.Rows[1:]
	if w := workload(t, Decide(rep), "openloop 50%"); w.Tie || !slices.Equal(w.Winners, []string{"postgres/advisory"}) {
		t.Errorf("disjoint intervals: winners %v tie %v, want postgres/advisory alone", w.Winners, w.Tie)
	}
}

func TestDecideMemoryNeverWins(t *testing.T) {
	mem := useRow("memory", nil, 2e3, 0.01)
	mem.Family = "memory"
	rep := &Report{Rows: []*Row{mem, useRow("redis", capsRedis, 100e3, 0.05), useRow("zookeeper", capsZK, 600e3, 0.05)}}
	v := Decide(rep)
	w := workload(t, v, Uncontended)
	if slices.Contains(w.Winners, "memory") || slices.Contains(w.RunnersUp, "memory") || w.Winners[0] != "redis" {
		t.Errorf("winners %v runners-up %v: memory must never win", w.Winners, w.RunnersUp)
	}
	if !strings.Contains(w.Text, "memory (in-process) 2.00 µs") {
		t.Errorf("memory is not shown: %s", w.Text)
	}
	n := 0
	for _, c := range v.Caveats {
		n += strings.Count(c, "not a distributed lock")
	}
	if n != 1 {
		t.Errorf("the reason memory never wins is said %d times in the caveats, want once: %q", n, v.Caveats)
	}
	if len(v.Safety) != 3 || v.Safety[2].Target != "memory" {
		t.Errorf("safety rows %+v: want memory shown, last", v.Safety)
	}
}

func TestDecideSkippedAndViolatingRowsNeverWin(t *testing.T) {
	skipped := useRow("mysql/getlock", capsForUpdate, 10e3, 0.01)
	skipped.Skipped = "server did not start"
	viol := useRow("redlock", capsRedlock, 20e3, 0.01)
	viol.Violations = 2
	rep := &Report{Rows: []*Row{skipped, viol, useRow("redis", capsRedis, 100e3, 0.05), useRow("zookeeper", capsZK, 600e3, 0.05)}}
	w := workload(t, Decide(rep), Uncontended)
	if !slices.Equal(w.Winners, []string{"redis"}) {
		t.Errorf("winners %v, want redis (the skipped and the violating rows may not win)", w.Winners)
	}
	if !strings.Contains(w.Text, "excluded: redlock (2 violations)") || strings.Contains(w.Text, "mysql/getlock") {
		t.Errorf("text should name the excluded row and not the skipped one: %s", w.Text)
	}
	if v := Decide(&Report{Rows: []*Row{skipped, viol}}); len(v.Workloads) != 0 {
		t.Errorf("no row may win, yet %+v", v.Workloads)
	}
}

// claimReport is a report with the three families of the seed claims:
// each family's strategies with their lock use (µs) and handoff rate.
func claimReport(use, handoff map[string]float64, caps map[string]*driver.Capabilities) *Report {
	rep := &Report{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range use {
			if !yield(k) {
				return
			}
		}
	}) {
		rep.Rows = append(rep.Rows, useRow(name, caps[name], use[name]*1e3, 0.04))
		if h, ok := handoff[name]; ok {
			rep.Rows = append(rep.Rows, rateRow(name, SafetyHandoff, caps[name], h, 0.04))
		}
	}
	return rep
}

var claimCaps = map[string]*driver.Capabilities{
	"redis": capsRedis, "redlock": capsRedlock, "zookeeper": capsZK,
	"mysql/forupdate": capsForUpdate, "mysql/getlock": capsForUpdate, "mysql/version": capsVersion,
}

func claimOf(t *testing.T, v *Verdict, prefix string) Claim {
	t.Helper()
	for _, c := range v.Claims {
		if strings.HasPrefix(c.Claim, prefix) {
			return c
		}
	}
	t.Fatalf("no claim %q in %+v", prefix, v.Claims)
	return Claim{}
}

func TestClaimPerformance(t *testing.T) {
	for _, tc := range []struct {
		name          string
		use, handoff  map[string]float64
		want, figures string
	}{
		{"confirmed", map[string]float64{"redis": 100, "zookeeper": 400, "mysql/forupdate": 900, "mysql/getlock": 700},
			map[string]float64{"redis": 800, "zookeeper": 500, "mysql/forupdate": 200, "mysql/getlock": 300},
			Confirmed, "cache (Redis) > MySQL holds for 2 of 2 strategy pairs"},
		{"refuted", map[string]float64{"redis": 300, "zookeeper": 400, "mysql/getlock": 100},
			map[string]float64{"redis": 800, "zookeeper": 500, "mysql/getlock": 300},
			Refuted, "mysql/getlock 100 µs beats zookeeper 400 µs"},
		{"depends", map[string]float64{"redis": 100, "zookeeper": 400, "mysql/forupdate": 900, "mysql/getlock": 200},
			map[string]float64{"redis": 800, "zookeeper": 500, "mysql/forupdate": 200, "mysql/getlock": 300},
			Depends, "ZooKeeper > MySQL holds for 1 of 2 strategy pairs, reversed for 1"},
		{"tie", map[string]float64{"redis": 100, "zookeeper": 101, "mysql/getlock": 900},
			map[string]float64{"redis": 800, "zookeeper": 500, "mysql/getlock": 300},
			Refuted, "within the noise"},
		{"not measured", map[string]float64{"redis": 100, "zookeeper": 400}, nil,
			NotMeasured, "Not measured: uncontended lock use (no MySQL)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claimOf(t, Decide(claimReport(tc.use, tc.handoff, claimCaps)), "performance")
			if c.Answer != tc.want || !strings.Contains(c.Figures, tc.figures) {
				t.Errorf("answer %q, want %q; figures lack %q:\n%s", c.Answer, tc.want, tc.figures, c.Figures)
			}
		})
	}
}

func TestClaimReliability(t *testing.T) {
	use := func(names ...string) map[string]float64 {
		m := map[string]float64{}
		for _, n := range names {
			m[n] = 100
		}
		return m
	}
	// A MySQL strategy that declares less than Redis, for the claim to hold.
	weak := &driver.Capabilities{Backend: "mysql", ReleaseOnCrash: driver.ReleaseAfterTTL}
	for _, tc := range []struct {
		name    string
		use     map[string]float64
		caps    map[string]*driver.Capabilities
		want    string
		figures string
	}{
		{"refuted by the real facts", use("redis", "zookeeper", "mysql/forupdate", "mysql/version"), claimCaps,
			Refuted, "cache (Redis) > MySQL holds for 0 of 2 strategy pairs, reversed for 2 (mysql/forupdate over redis"},
		{"confirmed", use("redis", "zookeeper", "mysql/forupdate"),
			map[string]*driver.Capabilities{"redis": capsRedis, "zookeeper": capsZK, "mysql/forupdate": weak},
			Confirmed, "ZooKeeper > cache (Redis) holds for 1 of 1"},
		{"depends on strategy", use("redis", "zookeeper", "mysql/forupdate", "mysql/version"),
			map[string]*driver.Capabilities{"redis": capsRedis, "zookeeper": capsZK, "mysql/forupdate": capsForUpdate, "mysql/version": weak},
			Depends, "zookeeper: fenced, tokens survive a restart, a crashed holder's lock freed within 4s"},
		{"not measured", use("redis", "zookeeper", "mysql/forupdate"), map[string]*driver.Capabilities{"redis": capsRedis},
			NotMeasured, "No strategy of ZooKeeper and MySQL was measured with its capabilities"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claimOf(t, Decide(claimReport(tc.use, nil, tc.caps)), "reliability")
			if c.Answer != tc.want || !strings.Contains(c.Figures, tc.figures) {
				t.Errorf("answer %q, want %q; figures lack %q:\n%s", c.Answer, tc.want, tc.figures, c.Figures)
			}
		})
	}
}

func TestClaimReliabilityCountsFaultViolations(t *testing.T) {
	rep := claimReport(map[string]float64{"redis": 100, "zookeeper": 100, "mysql/forupdate": 100}, nil, claimCaps)
	// ZooKeeper ahead of Redis on the declared facts; violations under
	// faults take its lead away (the facts no longer order them).
	if c := claimOf(t, DecideFaults(rep, map[string]int{"zookeeper": 0, "redis": 0}), "reliability"); !strings.Contains(c.Figures, "ZooKeeper > cache (Redis) holds for 1 of 1") {
		t.Errorf("without violations: %s", c.Figures)
	}
	c := claimOf(t, DecideFaults(rep, map[string]int{"zookeeper": 3, "redis": 0}), "reliability")
	if !strings.Contains(c.Figures, "ZooKeeper > cache (Redis) holds for 0 of 1") || !strings.Contains(c.Figures, "3 fault violations") {
		t.Errorf("with 3 violations on zookeeper: %s", c.Figures)
	}
}

func TestClaimEaseIsNotMeasured(t *testing.T) {
	c := claimOf(t, Decide(&Report{}), "ease")
	if c.Answer != NotMeasured || !strings.Contains(c.Figures, "Not measured by this benchmark") {
		t.Errorf("ease: %+v", c)
	}
}

func TestDecideSafetyAndParagraph(t *testing.T) {
	rep := &Report{Host: "box", NumCPU: 2, GoVersion: "go1.26", Started: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), Rows: []*Row{
		useRow("redis", capsRedis, 100e3, 0.05),
		useRow("zookeeper", capsZK, 600e3, 0.05),
		useRow("mysql/forupdate", capsForUpdate, 400e3, 0.05),
		useRow("mysql/version", capsVersion, 300e3, 0.05),
		rateRow("redis", SafetyHandoff, capsRedis, 500, 0.05),
		rateRow("zookeeper", SafetyHandoff, capsZK, 700, 0.05),
		rateRow("mysql/forupdate", SafetyHandoff, capsForUpdate, 300, 0.05),
		rateRow("mysql/version", SafetyHandoff, capsVersion, 200, 0.05),
	}}
	v := DecideFaults(rep, map[string]int{"redis": 0, "zookeeper": 0})
	want := map[string]SafetyRow{
		"redis":           {Fencing: "yes", SurvivesRestart: "no", Fair: "no", Waiters: "notify", FreedAfterCrash: "TTL", LostLease: "TTL", UseNs: 100e3, HandoffPerSec: 500},
		"zookeeper":       {Fencing: "yes", SurvivesRestart: "yes", Fair: "yes", Waiters: "queue", FreedAfterCrash: "session (4s)", LostLease: "session", UseNs: 600e3, HandoffPerSec: 700},
		"mysql/forupdate": {Fencing: "yes", SurvivesRestart: "yes", Fair: "no", Waiters: "queue", FreedAfterCrash: "at once", LostLease: "TTL+conn", UseNs: 400e3, HandoffPerSec: 300},
	}
	for _, s := range v.Safety {
		w, ok := want[s.Target]
		if !ok {
			continue
		}
		got := s
		got.Target, got.FaultViolations = "", nil
		if got != w {
			t.Errorf("%s: safety row\n%+v, want\n%+v", s.Target, got, w)
		}
		if (s.FaultViolations == nil) != (s.Target == "mysql/forupdate") {
			t.Errorf("%s: fault violations %v (nil means not run)", s.Target, s.FaultViolations)
		}
	}
	// The default is the fastest strategy whose tokens survive a restart
	// (mysql/version), not redis, whose do not.
	for _, want := range []string{"We use mysql/version by default", "redis is faster (100 µs [95.0, 105], ×3.00 ahead) but gives up tokens that survive a server restart",
		"choose mysql/forupdate (the lock lives in its connection", "choose zookeeper (a fair queue", "(box, 2 CPUs, go1.26, 2025-03-01)", "ratios between backends are what carry over"} {
		if !strings.Contains(v.Paragraph, want) {
			t.Errorf("paragraph lacks %q:\n%s", want, v.Paragraph)
		}
	}
}

func TestDecideCaveats(t *testing.T) {
	wide := useRow("redis", capsRedis, 100e3, 0.3)
	rep := &Report{Quick: true, Skipped: []string{"mysql: mariadbd not found"}, Load: &Load{OtherPct: 25, Avg1Start: 1, Avg1End: 2},
		Rows:   []*Row{wide, useRow("zookeeper", capsZK, 600e3, 0.05)},
		Settle: &SettleSummary{Waited: true, Settles: 40, TimedOut: 20, MaxWait: time.Second, Budget: time.Minute}}
	got := strings.Join(Decide(rep).Caveats, "\n")
	for _, want := range []string{"redis on uncontended ±30 %", "-quick run", "other processes used 25 %", "not measured: mysql: mariadbd not found",
		"20 of 40 settles gave up",
		"with 5 rounds an interval covers 93.8 %", "absolute figures are specific to this machine"} {
		if !strings.Contains(got, want) {
			t.Errorf("caveats lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "zookeeper on") {
		t.Errorf("a ±5 %% interval is listed as wide:\n%s", got)
	}
}

func TestVerdictWriteText(t *testing.T) {
	rep := claimReport(map[string]float64{"redis": 100, "redlock": 150, "zookeeper": 400, "mysql/forupdate": 900, "mysql/getlock": 200, "mysql/version": 250},
		map[string]float64{"redis": 800, "redlock": 600, "zookeeper": 500, "mysql/forupdate": 200, "mysql/getlock": 300, "mysql/version": 100}, claimCaps)
	rep.Rows = append(rep.Rows, useRow("postgres/forupdate", capsForUpdate, 380e3, 0.05), useRow("zookeeper-fsync", capsZK, 2e6, 0.05))
	v := DecideFaults(rep, map[string]int{"redis": 0})
	var b bytes.Buffer
	v.WriteText(&b)
	out := b.String()
	for _, want := range []string{"== verdict", "uncontended (lock use = acquire p50 + release p50", "redis wins at 100 µs", "redis wins at 800/s",
		"== safety beside speed", "postgres/forupdate", "not run",
		"performance: cache (Redis) > ZooKeeper > MySQL: DEPENDS ON STRATEGY", "reliability: ZooKeeper > cache (Redis) > MySQL: REFUTED",
		"ease of use: MySQL > cache (Redis) > ZooKeeper: NOT MEASURED", "== in a design document", "We use", "== caveats"} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteText lacks %q:\n%s", want, out)
		}
	}
	for i, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > textWidth {
			t.Errorf("line %d is %d columns wide (more than %d): %s", i+1, n, textWidth, line)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + out)
	}
}

func TestLoadFaultReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "faults.json")
	js := `{"command": "dlockchaos", "results": [
		{"backend": "redis", "fault": "kill", "fenced_violations": 0},
		{"backend": "redis", "fault": "failover", "fenced_violations": 1, "violations": ["lost a lock"]},
		{"backend": "redis-cluster", "fault": "kill", "fenced_violations": 0},
		{"backend": "zookeeper", "fault": "pause", "fenced_violations": 0},
		{"backend": "zookeeper-ensemble", "fault": "restart-ids", "fenced_violations": 0, "violations": ["stale clean-up"]},
		{"backend": "postgres/advisory", "fault": "kill", "fenced_violations": -1}
	]}`
	if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadFaultReport(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"redis": 2, "redis+cluster": 0, "zookeeper": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("LoadFaultReport = %v, want %v (an unchecked run counts nothing)", got, want)
	}
	// The fsync variant of ZooKeeper is the same strategy.
	rep := &Report{Rows: []*Row{useRow("zookeeper-fsync", capsZK, 1e6, 0.05), useRow("postgres/advisory", capsForUpdate, 1e5, 0.05)}}
	for _, s := range DecideFaults(rep, got).Safety {
		if s.Target == "zookeeper-fsync" && (s.FaultViolations == nil || *s.FaultViolations != 1) ||
			s.Target == "postgres/advisory" && s.FaultViolations != nil {
			t.Errorf("%s: fault violations %v", s.Target, s.FaultViolations)
		}
	}
	if err := os.WriteFile(path, []byte(`{"rows": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFaultReport(path); err == nil || !strings.Contains(err.Error(), "no results") {
		t.Errorf("a report without results: err = %v", err)
	}
	if _, err := LoadFaultReport(filepath.Join(t.TempDir(), "none.json")); err == nil {
		t.Error("a missing report: no error")
	}
}

// TestVerdictOfARealRun decides a real run of mem:// (three rounds of
// the uncontended and handoff workloads, aggregated as dlockbench does):
// memory is shown but wins nothing, its safety row has its measured
// figures, and the terminal text prints without a winner.
func TestVerdictOfARealRun(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	r := &Runner{}
	mem := MemoryTarget()
	rep := &Report{Rounds: 3}
	for _, w := range Plan(PlanOptions{Kinds: []string{Uncontended, Handoff}, Quick: true, Scale: 0.25}) {
		var rounds []*Result
		for range rep.Rounds {
			res, err := r.Run(ctx, mem, w, nil)
			if err != nil {
				t.Fatalf("%s: %v", w.Label(), err)
			}
			rounds = append(rounds, res)
		}
		row := AggregateRounds(rounds)
		row.Caps = &driver.Capabilities{Backend: "memory", Fencing: true, Fair: true, Wait: driver.WaitQueue, ReleaseOnCrash: driver.ReleaseAfterTTL}
		rep.Rows = append(rep.Rows, row)
	}
	Finalize(rep.Rows, []Target{mem}, nil)
	v := Decide(rep)
	if len(v.Workloads) != 0 {
		t.Errorf("memory won: %+v", v.Workloads)
	}
	if len(v.Safety) != 1 || v.Safety[0].Target != "memory" || v.Safety[0].UseNs <= 0 || v.Safety[0].HandoffPerSec <= 0 {
		t.Errorf("safety rows %+v, want memory with its lock use and handoff rate", v.Safety)
	}
	var b bytes.Buffer
	v.WriteText(&b)
	for _, want := range []string{"no distributed backend was measured", "== safety beside speed",
		"performance: cache (Redis) > ZooKeeper > MySQL: NOT MEASURED"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteText lacks %q:\n%s", want, b.String())
		}
	}
	if !slices.Contains(v.Caveats, memoryNote) {
		t.Errorf("the caveats do not say why memory never wins: %q", v.Caveats)
	}
	for line := range strings.Lines(b.String()) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "memory" &&
			strings.Join(f[:8], " ") != "memory yes no yes queue TTL TTL not" {
			t.Errorf("safety table row: %q", line)
		}
	}
}
