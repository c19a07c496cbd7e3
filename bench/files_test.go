package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/stats"
)

// ci builds an interval from per-round values, as AggregateRounds does.
func ci(xs ...float64) *stats.Interval { return stats.MedianCI(xs, Confidence) }

// syntheticReport is a finalized report of seven rounds without a run:
// a dlock row, its floor and round trip, a row whose ratio is unsettled,
// a skipped row, and a handoff with a dlock row and a peer.
func syntheticReport() *Report {
	unc := Workload{Kind: Uncontended, Clients: 1, Names: 1, Duration: time.Second}
	hand := Workload{Kind: Handoff, Clients: 8, Names: 1, Hold: time.Millisecond, Work: 2 * time.Millisecond, Duration: time.Second}
	row := func(name, kind string, w Workload) *Row {
		return &Row{Backend: name, Family: "redis", Server: "redis", Kind: kind, Workload: w.Kind, Label: w.Label(),
			Params: w.Params(), Procs: 1, ServerCmdsPerGrant: -1, ServerCPUPerGrantNs: -1}
	}
	// measured fills what every measured row has: acquire and release
	// percentiles, the grants, and the rate and lock use of each round.
	measured := func(r *Row, acq, rel [3]int64, grants uint64, rate, use []float64) *Row {
		r.P50, r.P99, r.P999 = acq[0], acq[1], acq[2]
		r.ReleaseP50, r.ReleaseP99, r.ReleaseP999 = rel[0], rel[1], rel[2]
		r.Grants, r.Rate, r.Use = grants, ci(rate...), ci(use...)
		r.GrantsPerSec = r.Rate.Median
		return r
	}
	redis := measured(row("redis", KindDlock, unc), [3]int64{60_000, 90_000, 120_000}, [3]int64{40_000, 70_000, 99_000},
		70_000, []float64{10_000, 9_900, 10_100, 10_050, 9_950, 10_000, 10_020},
		[]float64{100_000, 102_000, 98_000, 101_000, 99_000, 100_000, 103_000})
	redis.BaselineRTT, redis.Floor, redis.FloorNs = 30_000, "floor redis", 55_000
	redis.ToFloor, redis.ToRTT = ci(1.80, 1.83, 1.85, 1.81, 1.82, 1.84, 1.86), ci(3.2, 3.3, 3.4, 3.3, 3.3, 3.35, 3.25)
	redis.Peer, redis.ToPeer = "redislock", ci(1.20, 1.25, 1.22, 1.19, 1.21, 1.23, 1.24)
	redis.Jain, redis.MaxWait, redis.ServerCmdsPerGrant, redis.ServerCPUPerGrantNs = 1, 400_000, 3, 5_000
	redis.Caps = &driver.Capabilities{Backend: "redis", Strategy: "set-nx", Fencing: true, FencingNote: "INCR counter",
		Wait: driver.WaitNotify, ReleaseOnCrash: driver.ReleaseAfterTTL, MaxTTL: 24 * time.Hour}

	floor := measured(row("floor redis", KindFloor, unc), [3]int64{30_000, 50_000, 70_000}, [3]int64{25_000, 40_000, 60_000},
		120_000, []float64{18_000, 18_100, 17_900, 18_050, 18_000, 17_950, 18_020},
		[]float64{55_000, 54_000, 56_000, 55_500, 54_500, 55_000, 55_200})
	floor.BaselineRTT, floor.MaxWait, floor.ServerCmdsPerGrant = 30_000, 200_000, 2

	rtt := measured(row("rtt redis", KindRTT, unc), [3]int64{30_000, 45_000, 60_000}, [3]int64{40, 0, 0},
		200_000, []float64{30_000, 30_100, 29_900, 30_050, 30_000, 29_950, 30_020},
		[]float64{30_000, 30_500, 29_500, 30_200, 29_800, 30_000, 30_100})
	rtt.BaselineRTT, rtt.MaxWait = 30_000, 100_000

	// Its ×floor lies anywhere between 1.4 and 2.1: not settled.
	zk := measured(row("zookeeper", KindDlock, unc), [3]int64{200_000, 400_000, 900_000}, [3]int64{150_000, 300_000, 500_000},
		20_000, []float64{2_900, 2_000, 3_500, 2_800, 2_600, 3_100, 2_850},
		[]float64{350_000, 500_000, 290_000, 360_000, 380_000, 320_000, 340_000})
	zk.Family, zk.Server = "zookeeper", "zookeeper"
	zk.ToFloor = ci(1.75, 2.10, 1.40, 1.80, 1.70, 1.95, 1.60)
	zk.MaxWait = 3_000_000

	skipped := SkippedRow(Target{Name: "postgres/advisory", Kind: KindDlock, Backend: "postgres", Server: "postgres"}, unc,
		"postgres: server did not start")

	hd := measured(row("redis", KindDlock, hand), [3]int64{2_000_000, 9_000_000, 12_000_000}, [3]int64{40_000, 80_000, 100_000},
		5_000, []float64{700, 710, 690, 705, 695, 702, 698},
		[]float64{2_040_000, 2_100_000, 2_000_000, 2_050_000, 2_030_000, 2_060_000, 2_020_000})
	hd.HoldNs, hd.BaselineRTT, hd.FloorNs = 1_080_000, 30_000, 55_000
	hd.Ideal, hd.ToIdeal = ci(850, 860, 845, 855, 850, 852, 848), ci(0.82, 0.83, 0.81, 0.825, 0.82, 0.83, 0.815)
	hd.Peer, hd.ToPeer = "redsync", ci(1.5, 1.6, 1.4, 1.55, 1.5, 1.45, 1.52)
	hd.Handoffs, hd.HandoffP50, hd.HandoffP99 = 4_900, 90_000, 300_000
	hd.Jain, hd.MaxWait, hd.FailedPerGrant, hd.ServerCmdsPerGrant = 0.98, 20_000_000, 0.1, 5
	hd.Caps = redis.Caps

	peer := measured(row("redsync", KindPeer, hand), [3]int64{3_000_000, 20_000_000, 40_000_000}, [3]int64{40_000, 80_000, 100_000},
		3_300, []float64{470, 450, 480, 460, 475, 465, 468},
		[]float64{3_040_000, 3_100_000, 3_000_000, 3_050_000, 3_030_000, 3_060_000, 3_020_000})
	peer.HoldNs, peer.BaselineRTT = 1_090_000, 30_000
	peer.Ideal, peer.ToIdeal = hd.Ideal, ci(0.55, 0.53, 0.56, 0.54, 0.555, 0.545, 0.55)
	peer.Handoffs, peer.HandoffP50, peer.HandoffP99 = 3_200, 60_000_000, 240_000_000
	peer.Jain, peer.MaxWait, peer.FailedPerGrant, peer.ServerCmdsPerGrant = 0.7, 300_000_000, 4.2, 12

	return &Report{Started: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC), GoVersion: "test", Rounds: 7,
		Load: &Load{Avg1Start: 0.4, Avg1End: 0.9, BusyPct: 60, OtherPct: 3},
		Rows: []*Row{redis, floor, rtt, zk, skipped, hd, peer}}
}

// jsonRows writes rep as WriteFiles does and decodes its rows generically.
func jsonRows(t *testing.T, rep *Report) ([]byte, []map[string]any) {
	t.Helper()
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b, decodeRows(t, b, len(rep.Rows))
}

// decodeRows decodes the rows of a report.json generically and checks
// that it holds n of them.
func decodeRows(t *testing.T, b []byte, n int) []map[string]any {
	t.Helper()
	var got struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Rows) != n {
		t.Fatalf("report.json has %d rows, want %d", len(got.Rows), n)
	}
	return got.Rows
}

func TestJSONNullWhereAFigureDoesNotApply(t *testing.T) {
	rep := syntheticReport()
	_, rows := jsonRows(t, rep)
	for _, tc := range []struct {
		row          int
		why          string
		nulls, numbs []string
		intervals    []string
	}{
		{0, "a measured dlock row uncontended: no hold, no handoff, no Jain index over one client",
			[]string{"hold_ns", "handoffs", "handoff_p50_ns", "handoff_p99_ns", "jain", "ideal_grants_per_sec", "ratio_to_ideal"},
			[]string{"p50_ns", "release_p50_ns", "grants", "baseline_rtt_ns", "floor_ns", "violations", "fencing_violations",
				"server_cmds_per_grant", "server_cpu_per_grant_ns", "max_wait_ns", "errors", "procs", "failed_attempts_per_grant"},
			[]string{"grants_per_sec", "use_ns", "ratio_to_floor", "ratio_to_rtt", "ratio_to_peer"}},
		{1, "a floor runs alone: the checker has nothing to count; Redis's CPU was not read",
			[]string{"violations", "fencing_violations", "server_cpu_per_grant_ns", "floor_ns", "ratio_to_floor", "ratio_to_peer"},
			[]string{"p50_ns", "release_p50_ns", "server_cmds_per_grant", "baseline_rtt_ns"},
			[]string{"use_ns", "grants_per_sec"}},
		{2, "a round trip has nothing to release and never fails",
			[]string{"release_p50_ns", "release_p99_ns", "release_p999_ns", "failed_attempts_per_grant", "violations",
				"server_cmds_per_grant", "server_cpu_per_grant_ns"},
			[]string{"p50_ns", "grants"},
			[]string{"use_ns"}},
		{4, "a skipped row measured nothing",
			[]string{"p50_ns", "p99_ns", "p999_ns", "release_p50_ns", "grants", "grants_per_sec", "use_ns", "procs",
				"violations", "errors", "max_wait_ns", "server_cmds_per_grant", "server_cpu_per_grant_ns", "baseline_rtt_ns",
				"floor_ns", "ratio_to_floor", "jain", "hold_ns"},
			nil, nil},
		{5, "a dlock row of the handoff: hold, handoffs, Jain; use is an uncontended figure",
			[]string{"use_ns", "ratio_to_floor", "ratio_to_rtt", "server_cpu_per_grant_ns"},
			[]string{"hold_ns", "handoffs", "handoff_p50_ns", "handoff_p99_ns", "jain", "failed_attempts_per_grant",
				"fencing_violations", "violations"},
			[]string{"grants_per_sec", "ideal_grants_per_sec", "ratio_to_ideal", "ratio_to_peer"}},
		{6, "a peer's tokens are not checked",
			[]string{"fencing_violations", "ratio_to_peer"},
			[]string{"violations", "hold_ns", "handoff_p50_ns"},
			[]string{"grants_per_sec", "ratio_to_ideal"}},
	} {
		r := rows[tc.row]
		name := r["backend"].(string) + " " + r["label"].(string)
		for _, k := range tc.nulls {
			v, ok := r[k]
			if !ok || v != nil {
				t.Errorf("%s: %s = %v (present %v), want null: %s", name, k, v, ok, tc.why)
			}
		}
		for _, k := range tc.numbs {
			if _, ok := r[k].(float64); !ok {
				t.Errorf("%s: %s = %#v, want a number: %s", name, k, r[k], tc.why)
			}
		}
		for _, k := range tc.intervals {
			iv, ok := r[k].(map[string]any)
			if !ok {
				t.Errorf("%s: %s = %#v, want an interval: %s", name, k, r[k], tc.why)
				continue
			}
			for _, f := range []string{"median", "lo", "hi", "rounds", "confidence"} {
				if _, ok := iv[f].(float64); !ok {
					t.Errorf("%s: %s.%s = %#v, want a number", name, k, f, iv[f])
				}
			}
		}
	}
	// Capabilities carry units too, and null for "the TTL" or "no limit".
	caps, _ := rows[0]["capabilities"].(map[string]any)
	if caps == nil || caps["release_on_crash_ns"] != nil || caps["release_after_ttl"] != true ||
		caps["max_ttl_ns"] != float64(24*time.Hour) || caps["min_ttl_ns"] != nil {
		t.Errorf("capabilities = %v, want release after the TTL (null ns), max_ttl_ns 24h, min_ttl_ns null", caps)
	}
}

// TestJSONUnits checks that every numeric field's name says its unit or
// is a count, an index or a ratio.
func TestJSONUnits(t *testing.T) {
	_, rows := jsonRows(t, syntheticReport())
	unitless := []string{"grants", "handoffs", "violations", "fencing_violations", "errors", "procs", "jain"}
	suffixes := []string{"_ns", "_per_sec", "_per_grant", "_bytes"}
	var check func(prefix string, m map[string]any)
	check = func(prefix string, m map[string]any) {
		for k, v := range m {
			switch x := v.(type) {
			case map[string]any:
				if prefix == "" && k != "params" {
					if _, isIv := x["median"]; isIv {
						// An interval's unit is its field's name.
						check("", map[string]any{k: x["median"]})
						continue
					}
					check(k+".", x)
				}
			case []any:
				if len(x) > 0 {
					if _, pairs := x[0].([]any); pairs && !strings.HasSuffix(k, "_ns") {
						t.Errorf("%s%s: [quantile, value] pairs whose name has no unit", prefix, k)
					}
				}
			case float64:
				ok := slices.Contains(unitless, k) || strings.HasPrefix(k, "ratio_")
				for _, s := range suffixes {
					ok = ok || strings.HasSuffix(k, s)
				}
				if !ok {
					t.Errorf("%s%s is a number whose name has no unit", prefix, k)
				}
			}
		}
	}
	for _, r := range rows {
		check("", r)
	}
}

// TestJSONRoundTrip: a report read back from report.json has the rows it
// was written from, -1 and 0 where the Row keeps "does not apply".
func TestJSONRoundTrip(t *testing.T) {
	rep := syntheticReport()
	rep.Rows[0].Latency = [][2]float64{{0.5, 60_000}, {1, 900_000}}
	rep.Rows[5].HandoffCDF = [][2]float64{{0.5, 90_000}, {1, 2_000_000}}
	b, _ := jsonRows(t, rep)
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != len(rep.Rows) {
		t.Fatalf("read %d rows, wrote %d", len(back.Rows), len(rep.Rows))
	}
	// Figures that do not apply come back as the Row's "does not apply".
	want := syntheticReport().Rows
	want[0].Latency = rep.Rows[0].Latency
	want[5].HandoffCDF = rep.Rows[5].HandoffCDF
	want[0].Jain = 0                    // one client uncontended
	want[2].ReleaseP50 = 0              // a round trip releases nothing
	want[5].Use, want[6].Use = nil, nil // lock use is an uncontended figure
	for i, want := range want {
		got := back.Rows[i]
		// Params come back as JSON numbers; compare them as JSON.
		gp, _ := json.Marshal(got.Params)
		wp, _ := json.Marshal(want.Params)
		if !bytes.Equal(gp, wp) {
			t.Errorf("row %d params: got %s, want %s", i, gp, wp)
		}
		g, w := *got, *want
		g.Params, w.Params = nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Errorf("row %d (%s %s) changed on the way:\n got %+v\nwant %+v", i, want.Backend, want.Label, g, w)
		}
	}
	// A row built from one result, with no intervals, gets an interval of
	// one round rather than a lost figure.
	one := &Row{Backend: "memory", Kind: KindDlock, Workload: Uncontended, Label: "uncontended", Grants: 10,
		GrantsPerSec: 1000, P50: 500, ReleaseP50: 300, ServerCmdsPerGrant: -1, ServerCPUPerGrantNs: -1}
	b, err := json.Marshal(one)
	if err != nil {
		t.Fatal(err)
	}
	var r Row
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.GrantsPerSec != 1000 || r.Rate == nil || r.Rate.Rounds != 1 || Med(r.Use) != 800 || r.ServerCmdsPerGrant != -1 {
		t.Errorf("one-result row read back as %+v (rate %+v, use %+v)", r, r.Rate, r.Use)
	}
}

func TestCSVColumns(t *testing.T) {
	rep := syntheticReport()
	var buf bytes.Buffer
	if err := rep.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(rep.Rows)+1 {
		t.Fatalf("report.csv has %d lines, want %d", len(recs), len(rep.Rows)+1)
	}
	head := recs[0]
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, want := range []string{"use_ns", "use_ns_lo", "use_ns_hi", "grants_per_sec", "grants_per_sec_lo", "grants_per_sec_hi",
		"ratio_to_floor", "ratio_to_floor_lo", "ratio_to_floor_hi", "ratio_to_peer_lo", "ratio_to_ideal_hi",
		"ideal_grants_per_sec_lo", "interval_wide", "interval_confidence", "rounds", "report_rounds", "hold_ns", "p50_ns"} {
		if _, ok := col[want]; !ok {
			t.Errorf("report.csv header lacks %q: %v", want, head)
		}
	}
	text := []string{"backend", "family", "kind", "workload", "label", "floor", "peer", "skipped", "interval_wide"}
	unitless := []string{"clients", "procs", "rounds", "report_rounds", "grants", "handoffs", "jain", "violations",
		"fencing_violations", "errors", "interval_confidence"}
	for _, h := range head {
		base := strings.TrimSuffix(strings.TrimSuffix(h, "_lo"), "_hi")
		if slices.Contains(text, h) || slices.Contains(unitless, h) || strings.HasPrefix(h, "ratio_") ||
			strings.HasSuffix(base, "_ns") || strings.HasSuffix(base, "_per_sec") || strings.HasSuffix(base, "_per_grant") || strings.HasSuffix(base, "_pct") {
			continue
		}
		t.Errorf("report.csv column %q has no unit", h)
	}
	get := func(row int, c string) string { return recs[row+1][col[c]] }
	for i, rec := range recs[1:] {
		for j, v := range rec {
			if v == "-1" {
				t.Errorf("row %d (%s) column %s is -1: a figure that does not apply is an empty cell", i, rec[0], head[j])
			}
		}
	}
	// The skipped row: names and the reason, no figures.
	for j, h := range head {
		v := recs[5][j]
		switch h {
		case "backend", "family", "kind", "workload", "label", "clients", "skipped", "report_rounds":
			if v == "" {
				t.Errorf("skipped row: %s is empty", h)
			}
		default:
			if v != "" {
				t.Errorf("skipped row: %s = %q, want an empty cell", h, v)
			}
		}
	}
	for _, c := range []struct {
		row       int
		col, want string
	}{
		{0, "use_ns", "100000"}, {0, "use_ns_lo", "98000"}, {0, "use_ns_hi", "103000"},
		{0, "ratio_to_floor", "1.83"}, {0, "interval_wide", "false"}, {0, "rounds", "7"}, {0, "report_rounds", "7"},
		{0, "server_cmds_per_grant", "3"}, {0, "jain", ""}, {0, "hold_ns", ""},
		{1, "violations", ""}, {1, "server_cpu_per_grant_ns", ""}, {2, "release_p50_ns", ""},
		{3, "interval_wide", "true"}, {3, "ratio_to_floor_lo", "1.4"}, {3, "ratio_to_floor_hi", "2.1"},
		{5, "use_ns", ""}, {5, "hold_ns", "1080000"}, {5, "ratio_to_ideal", "0.82"}, {5, "handoff_p50_ns", "90000"},
		{6, "fencing_violations", ""}, {6, "violations", "0"},
	} {
		if got := get(c.row, c.col); got != c.want {
			t.Errorf("row %d (%s) %s = %q, want %q", c.row, rep.Rows[c.row].Backend, c.col, got, c.want)
		}
	}
}
