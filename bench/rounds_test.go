package bench

import (
	"slices"
	"testing"
	"time"
)

// TestRotationNeverAlwaysFollows: over the rounds of a workload, no
// target always runs right after the same other one (it would inherit
// that one's aftermath in every round), every round runs every target
// once, and the first slot goes round the targets.
func TestRotationNeverAlwaysFollows(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for _, rounds := range []int{2, 3, 5, 15} {
			follows := map[[2]int]int{} // (a, b): rounds in which b ran right after a
			firsts := map[int]int{}
			for r := range rounds {
				order := Rotation(n, r)
				sorted := slices.Sorted(slices.Values(order))
				for i, v := range sorted {
					if v != i {
						t.Fatalf("Rotation(%d, %d) = %v: not every target once", n, r, order)
					}
				}
				if n > 0 {
					firsts[order[0]]++
				}
				for i := 1; i < n; i++ {
					follows[[2]int{order[i-1], order[i]}]++
				}
			}
			for pair, k := range follows {
				if k == rounds {
					t.Errorf("n=%d, %d rounds: target %d runs right after %d in every round", n, rounds, pair[1], pair[0])
				}
			}
			if rounds >= n && n > 1 {
				for i := range n {
					if firsts[i] == 0 {
						t.Errorf("n=%d, %d rounds: target %d never runs first", n, rounds, i)
					}
				}
			}
		}
	}
}

// result makes a synthetic Result: grants per client over elapsed,
// acquires of acq ns, releases of rel ns, holds of hold ns.
func result(grants []uint64, elapsed time.Duration, acq, rel, hold int64) *Result {
	res := &Result{Target: MemoryTarget(), Workload: Workload{Kind: Handoff, Clients: len(grants), Names: 1, Hold: time.Millisecond},
		Acquire: newHist(), Release: newHist(), Handoff: newHist(), Hold: newHist(), Grants: grants, Elapsed: elapsed}
	var n uint64
	for _, g := range grants {
		n += g
	}
	for range n {
		record(res.Acquire, acq)
		record(res.Release, rel)
		record(res.Hold, hold)
	}
	return res
}

// TestAggregateRoundsP99OfTheOpenLoop: an open-loop row carries the
// median of its rounds' acquire p99s with an interval; other rows do not.
func TestAggregateRoundsP99OfTheOpenLoop(t *testing.T) {
	var rounds []*Result
	for _, acq := range []int64{1_000_000, 3_000_000, 2_000_000} {
		res := result([]uint64{50, 50}, 100*time.Millisecond, acq, 500, 0)
		res.Workload = Workload{Kind: OpenLoop, Clients: 2, Names: 100, Load: 0.5}
		rounds = append(rounds, res)
	}
	row := AggregateRounds(rounds)
	if iv := row.RoundP99; iv == nil || !near(iv.Median, 2_000_000) || !near(iv.Lo, 1_000_000) || !near(iv.Hi, 3_000_000) || iv.Rounds != 3 {
		t.Errorf("RoundP99 = %+v; want 2 ms [1, 3] over 3 rounds", iv)
	}
	if row := AggregateRounds([]*Result{result([]uint64{5}, time.Second, 100, 100, 0)}); row.RoundP99 != nil {
		t.Errorf("a handoff row has RoundP99 %+v; want nil (null in report.json)", row.RoundP99)
	}
}

func near(a, b float64) bool { return a > b*0.99 && a < b*1.01 }

// TestAggregateRoundsMergesAndSummarises: one row from the rounds of a
// target: totals and percentiles over all rounds, rate and use as the
// median of the rounds, each round's figures kept with its index, a
// skipped round left out.
func TestAggregateRoundsMergesAndSummarises(t *testing.T) {
	rounds := []*Result{
		result([]uint64{50, 50}, 100*time.Millisecond, 1000, 500, 1_100_000), // 1000/s
		nil, // the target failed this round
		result([]uint64{100, 100}, 100*time.Millisecond, 3000, 500, 1_200_000), // 2000/s
		result([]uint64{30, 30}, 100*time.Millisecond, 2000, 500, 1_100_000),   // 600/s
	}
	rounds[3].Exclusion = 1
	row := AggregateRounds(rounds)
	if row == nil {
		t.Fatal("AggregateRounds returned no row")
	}
	if row.Grants != 360 || row.Violations != 1 {
		t.Errorf("grants %d, violations %d; want 360 and 1 (summed over rounds)", row.Grants, row.Violations)
	}
	if len(row.Rounds) != 3 || row.Rounds[0].Round != 0 || row.Rounds[1].Round != 2 || row.Rounds[2].Round != 3 {
		t.Fatalf("rounds = %+v; want rounds 0, 2 and 3", row.Rounds)
	}
	if row.Rate == nil || row.Rate.Median != 1000 || row.Rate.Lo != 600 || row.Rate.Hi != 2000 || row.Rate.Rounds != 3 {
		t.Errorf("rate = %+v; want median 1000 of [600, 2000] over 3 rounds", row.Rate)
	}
	if row.GrantsPerSec != 1000 {
		t.Errorf("grants/s = %v; want the rate's median 1000, not the pooled %v", row.GrantsPerSec, 360/0.3)
	}
	if row.Use == nil || !near(row.Use.Median, 2500) {
		t.Errorf("use = %+v; want the median of the rounds' acquire+release p50s, 2500 ns", row.Use)
	}
	// Merged: 200 of 360 acquires took 3000 ns.
	if !near(float64(row.P50), 3000) || !near(float64(row.HoldNs), 1_100_000) && !near(float64(row.HoldNs), 1_200_000) {
		t.Errorf("p50 = %d, hold = %d; want the merged histograms' 3000 ns and about 1.1–1.2 ms", row.P50, row.HoldNs)
	}
	if AggregateRounds([]*Result{nil, nil}) != nil {
		t.Error("a target without any round got a row")
	}
}

// TestGroupedRotation: every round runs every target once, a group's
// targets one after another (the rows compared with each other run side
// by side), no target runs right after the same other one in every round
// once there are more rounds than one, and every group and every target
// of a group gets to run first.
func TestGroupedRotation(t *testing.T) {
	layouts := [][]string{
		{"a"},
		{"a", "a", "a"},
		{"m", "r", "r", "r", "r", "z", "z", "p"},
		{"r", "z", "r", "z", "e"}, // a group's targets need not be listed together
		{"m", "r", "r", "r", "r", "r", "r", "r", "r", "z", "z", "z", "z", "z", "p", "p", "p", "p", "e", "e", "e", "e"},
	}
	for _, group := range layouts {
		n := len(group)
		for _, rounds := range []int{2, 6, 30} {
			follows := map[[2]int]int{}
			firsts := map[string]map[int]bool{}
			for r := range rounds {
				order := GroupedRotation(group, r)
				if sorted := slices.Sorted(slices.Values(order)); !slices.Equal(sorted, seq(n)) {
					t.Fatalf("%v round %d: %v: not every target once", group, r, order)
				}
				done := map[string]bool{}
				for i, v := range order {
					g := group[v]
					if i > 0 && group[order[i-1]] != g {
						if done[g] {
							t.Fatalf("%v round %d: %v: group %s split", group, r, order, g)
						}
					}
					if i == 0 || group[order[i-1]] != g {
						if firsts[g] == nil {
							firsts[g] = map[int]bool{}
						}
						firsts[g][v] = true
					}
					done[g] = true
					if i > 0 {
						follows[[2]int{order[i-1], v}]++
					}
				}
			}
			for pair, k := range follows {
				if k == rounds && n > 2 {
					t.Errorf("%v, %d rounds: target %d runs right after %d in every round", group, rounds, pair[1], pair[0])
				}
			}
			if rounds >= n {
				for g, m := range firsts {
					size := 0
					for _, x := range group {
						if x == g {
							size++
						}
					}
					if len(m) != size {
						t.Errorf("%v, %d rounds: only %d of group %s's %d targets ever ran first in it", group, rounds, len(m), g, size)
					}
				}
			}
		}
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
