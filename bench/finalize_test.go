package bench

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/stats"
)

// roundsRow is a synthetic row with per-round figures, as AggregateRounds
// makes it.
func roundsRow(name, kind, workload string, figs ...RoundFigures) *Row {
	w := Workload{Kind: workload, Clients: 1, Names: 1}
	if workload == Handoff {
		w = Workload{Kind: Handoff, Clients: 32, Names: 1, Hold: time.Millisecond, Work: 2 * time.Millisecond}
	}
	r := &Row{Backend: name, Kind: kind, Server: "s", Workload: workload, Label: w.Label(), Params: w.Params(), Grants: 1, Rounds: figs}
	var use, rate []float64
	for _, f := range figs {
		use, rate = append(use, f.UseNs), append(rate, f.GrantsPerSec)
	}
	r.Use, r.Rate = stats.MedianCI(use, Confidence), stats.MedianCI(rate, Confidence)
	r.GrantsPerSec = r.Rate.Median
	return r
}

func uses(ns ...float64) []RoundFigures {
	out := make([]RoundFigures, len(ns))
	for i, v := range ns {
		out[i] = RoundFigures{Round: i, UseNs: v, GrantsPerSec: 1e9 / v}
	}
	return out
}

var pairTargets = []Target{
	{Name: "dl", Kind: KindDlock, Floor: "floor", RTT: "rtt"},
	{Name: "peer", Kind: KindPeer, Floor: "floor", RTT: "rtt"},
	{Name: "floor", Kind: KindFloor, RTT: "rtt"},
	{Name: "rtt", Kind: KindRTT},
	MemoryTarget(),
}

// TestFinalizePairsPerRound: a ratio is taken round by round between rows
// measured side by side, then summarised; a round that slows the row and
// its reference alike (a noisy machine) does not move it.
func TestFinalizePairsPerRound(t *testing.T) {
	// Round 1 is noisy: everything 3× slower. Per round, dl is 2× the
	// floor (2, 2, 1.82); the medians (200 over 110) would say 1.82.
	dl := roundsRow("dl", KindDlock, Uncontended, uses(200, 600, 200)...)
	floor := roundsRow("floor", KindFloor, Uncontended, uses(100, 300, 110)...)
	rtt := roundsRow("rtt", KindRTT, Uncontended, uses(50, 150, 50)...)
	Finalize([]*Row{dl, floor, rtt}, pairTargets, nil)
	if dl.ToFloor == nil || dl.ToFloor.Median != 2 {
		t.Errorf("ToFloor = %+v; want the median of the per-round ratios, 2", dl.ToFloor)
	}
	if dl.ToRTT == nil || dl.ToRTT.Median != 4 || dl.ToRTT.Lo != 4 || dl.ToRTT.Hi != 4 {
		t.Errorf("ToRTT = %+v; want exactly 4 in every round", dl.ToRTT)
	}
	if dl.FloorNs != 110 || dl.BaselineRTT != 50 {
		t.Errorf("FloorNs = %d, BaselineRTT = %d; want the medians 110 and 50", dl.FloorNs, dl.BaselineRTT)
	}

	// Five rounds, two of them 3× slower for both: the ratio stays 2 with
	// no width at all.
	dl = roundsRow("dl", KindDlock, Uncontended, uses(200, 660, 220, 630, 190)...)
	floor = roundsRow("floor", KindFloor, Uncontended, uses(100, 330, 110, 315, 95)...)
	Finalize([]*Row{dl, floor}, pairTargets, nil)
	if iv := dl.ToFloor; iv == nil || iv.Median != 2 || iv.Lo != 2 || iv.Hi != 2 || iv.Wide(WideInterval) {
		t.Errorf("ToFloor with noisy rounds = %+v; want exactly 2", iv)
	}
}

// TestFinalizePairsTheRoundsBothHave: a row that lost a round is paired
// by round index, not by position.
func TestFinalizePairsTheRoundsBothHave(t *testing.T) {
	figs := uses(200, 0, 400, 800)
	figs = append(figs[:1], figs[2:]...) // round 1 failed: rounds 0, 2, 3
	dl := roundsRow("dl", KindDlock, Uncontended, figs...)
	floor := roundsRow("floor", KindFloor, Uncontended, uses(100, 150, 200, 400)...)
	Finalize([]*Row{dl, floor}, pairTargets, nil)
	if iv := dl.ToFloor; iv == nil || iv.Rounds != 3 || iv.Lo != 2 || iv.Hi != 2 {
		t.Errorf("ToFloor = %+v; want 2 from the 3 rounds both rows have", iv)
	}
}

// TestFinalizePeersPerRound: the best peer is chosen by its median and
// compared round by round: grants/s for contended workloads (higher is
// better), lock use uncontended (lower is better).
func TestFinalizePeersPerRound(t *testing.T) {
	rates := func(vs ...float64) []RoundFigures {
		out := make([]RoundFigures, len(vs))
		for i, v := range vs {
			out[i] = RoundFigures{Round: i, GrantsPerSec: v, HoldNs: 1.1e6}
		}
		return out
	}
	dl := roundsRow("dl", KindDlock, Handoff, rates(1000, 500, 1000)...)
	peer := roundsRow("peer", KindPeer, Handoff, rates(500, 250, 450)...)
	Finalize([]*Row{dl, peer}, pairTargets, nil)
	if dl.Peer != "peer" || dl.ToPeer == nil || dl.ToPeer.Median != 2 {
		t.Errorf("peer %q, ToPeer = %+v; want peer and the per-round median 2 (the medians say 2.22)", dl.Peer, dl.ToPeer)
	}
	dlU := roundsRow("dl", KindDlock, Uncontended, uses(300, 900, 300)...)
	peerU := roundsRow("peer", KindPeer, Uncontended, uses(100, 300, 120)...)
	Finalize([]*Row{dlU, peerU}, pairTargets, nil)
	if dlU.ToPeer == nil || dlU.ToPeer.Median != 3 {
		t.Errorf("uncontended ToPeer = %+v; want lock use over the peer's, per round: 3", dlU.ToPeer)
	}
}

// TestFinalizeBestPeerPerRound: two peers that tie trade places from
// round to round; a row is compared with the best of them in each round,
// so its ratio does not jump with whichever peer's median came out ahead
// (which, run to run, is a coin toss). Against one peer chosen by its
// median, the ratio below would swing between 2 and 2.6 from round to
// round; against the best of each round it is 2 in every one.
func TestFinalizeBestPeerPerRound(t *testing.T) {
	rates := func(vs ...float64) []RoundFigures {
		out := make([]RoundFigures, len(vs))
		for i, v := range vs {
			out[i] = RoundFigures{Round: i, GrantsPerSec: v, HoldNs: 1.1e6}
		}
		return out
	}
	a := roundsRow("peer-a", KindPeer, Handoff, rates(1000, 1300, 1000, 1300, 1300)...)
	b := roundsRow("peer-b", KindPeer, Handoff, rates(1300, 1000, 1300, 1000, 1000)...)
	dl := roundsRow("dl", KindDlock, Handoff, rates(2600, 2600, 2600, 2600, 2600)...)
	Finalize([]*Row{dl, a, b}, pairTargets, nil)
	if iv := dl.ToPeer; iv == nil || iv.Median != 2 || iv.Lo != 2 || iv.Hi != 2 {
		t.Errorf("ToPeer = %+v; want exactly 2: the best peer of each round did 1300", iv)
	}
	if dl.Peer != "peer-a" {
		t.Errorf("Peer = %q; want peer-a, the best in 3 rounds of 5", dl.Peer)
	}
	// A peer is compared with the other peers, never with itself.
	if iv := a.ToPeer; iv == nil || iv.Median != 1.3 || b.Peer != "peer-a" || a.Peer != "peer-b" {
		t.Errorf("peer-a ToPeer = %+v (over %q), peer-b over %q; want 1.3 over peer-b and peer-b over peer-a", iv, a.Peer, b.Peer)
	}
	// Uncontended: lower lock use is better.
	ua := roundsRow("peer-a", KindPeer, Uncontended, uses(100, 130, 100)...)
	ub := roundsRow("peer-b", KindPeer, Uncontended, uses(130, 100, 130)...)
	udl := roundsRow("dl", KindDlock, Uncontended, uses(150, 150, 150)...)
	Finalize([]*Row{udl, ua, ub}, pairTargets, nil)
	if iv := udl.ToPeer; iv == nil || iv.Median != 1.5 || iv.Lo != 1.5 || iv.Hi != 1.5 || udl.Peer != "peer-a" {
		t.Errorf("uncontended ToPeer = %+v over %q; want exactly 1.5 over the fastest peer of each round (peer-a: 2 rounds of 3)", iv, udl.Peer)
	}
}

// TestFinalizeIdealFromMeasuredHoldAndFloor: the handoff ideal is built
// from the hold each round really took and the floor's lock use on the
// same server; a row without a floor gets none (null), not a guess.
func TestFinalizeIdealFromMeasuredHoldAndFloor(t *testing.T) {
	figs := []RoundFigures{
		{Round: 0, GrantsPerSec: 700, HoldNs: 1.1e6},
		{Round: 1, GrantsPerSec: 400, HoldNs: 1.9e6},
		{Round: 2, GrantsPerSec: 720, HoldNs: 1.1e6},
	}
	dl := roundsRow("dl", KindDlock, Handoff, figs...)
	floor := roundsRow("floor", KindFloor, Uncontended, uses(100_000, 100_000, 100_000)...)
	// The handover: the floor's release, then the next holder told (no
	// round-trip row here: the floor's acquire stands in).
	floor.P50, floor.ReleaseP50 = 60_000, 40_000
	mem := roundsRow("memory", KindDlock, Handoff, figs...)
	// A client that spins while it waits stretches its own holds: the
	// ideal is built from the shortest hold of the round, not its own.
	spinner := roundsRow("dl", KindDlock, Handoff, figs...)
	spinner.Rounds = slices.Clone(figs)
	for i := range spinner.Rounds {
		spinner.Rounds[i].HoldNs += 0.5e6
	}
	Finalize([]*Row{dl, floor, mem}, pairTargets, nil)
	Finalize([]*Row{spinner, dl, floor}, pairTargets, nil)
	if spinner.Ideal == nil || dl.Ideal == nil || spinner.Ideal.Median != dl.Ideal.Median {
		t.Errorf("ideal of a row with stretched holds %+v, of its neighbour %+v; want the same, from the shortest holds", spinner.Ideal, dl.Ideal)
	}
	// 32 clients ask for more than one name can give: 1/(hold + 100 µs).
	want := []float64{1 / 1.2e-3, 1 / 2.0e-3, 1 / 1.2e-3}
	if dl.Ideal == nil || !near(dl.Ideal.Median, want[0]) || !near(dl.Ideal.Lo, want[1]) {
		t.Errorf("ideal = %+v; want median %.1f/s (1.1 ms held + the floor's 100 µs), low %.1f/s", dl.Ideal, want[0], want[1])
	}
	if dl.ToIdeal == nil || !near(dl.ToIdeal.Median, 700/want[0]) || !near(dl.ToIdeal.Lo, 400/want[1]) {
		t.Errorf("to ideal = %+v; want per round %.3f, %.3f, %.3f", dl.ToIdeal, 700/want[0], 400/want[1], 720/want[2])
	}
	if mem.Ideal != nil || mem.ToIdeal != nil {
		t.Errorf("memory (no floor) got ideal %+v, %+v; want none", mem.Ideal, mem.ToIdeal)
	}
	b, err := json.Marshal(mem)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"ideal_grants_per_sec":null`) || !strings.Contains(string(b), `"ratio_to_ideal":null`) {
		t.Errorf("memory row's JSON does not say null for the ideal: %s", b)
	}
}

// TestFinalizeWithoutRounds: rows measured once (no rounds) still get
// their ratios, from the medians.
func TestFinalizeWithoutRounds(t *testing.T) {
	dl := &Row{Backend: "dl", Kind: KindDlock, Workload: Uncontended, P50: 300, ReleaseP50: 100, Grants: 1}
	floor := &Row{Backend: "floor", Kind: KindFloor, Workload: Uncontended, P50: 150, ReleaseP50: 50, Grants: 1}
	Finalize([]*Row{dl, floor}, pairTargets, nil)
	if dl.ToFloor == nil || dl.ToFloor.Median != 2 {
		t.Errorf("ToFloor = %+v; want 2", dl.ToFloor)
	}
}

// TestFinalizeNoPeerRatioInTheOpenLoop: the open loop offers each target a
// share of its own capacity, so a grants/s ratio between two targets
// compares what they were offered; it is left out (null), not computed.
func TestFinalizeNoPeerRatioInTheOpenLoop(t *testing.T) {
	rates := []RoundFigures{{Round: 0, GrantsPerSec: 900}, {Round: 1, GrantsPerSec: 1000}}
	dl := roundsRow("dl", KindDlock, OpenLoop, rates...)
	peer := roundsRow("peer", KindPeer, OpenLoop, rates...)
	Finalize([]*Row{dl, peer}, pairTargets, nil)
	if dl.ToPeer != nil || dl.Peer != "" {
		t.Errorf("open loop: peer %q, ToPeer %+v; want none", dl.Peer, dl.ToPeer)
	}
}

// TestFinalizeIdealFromPacedReferences: the handoff ideal's gap is, round
// by round, the paced floor release plus the paced round trip measured in
// that round with the row's hold, not the uncontended tight loop's; the
// tight gap stays in the row (ideal_gap_hot_ns, the hot ideal) for
// comparison; a round without its paced references falls back to the
// hot gap, and a row whose floor has neither gets no ideal.
func TestFinalizeIdealFromPacedReferences(t *testing.T) {
	figs := []RoundFigures{
		{Round: 0, GrantsPerSec: 700, HoldNs: 1.1e6},
		{Round: 1, GrantsPerSec: 400, HoldNs: 1.9e6},
		{Round: 2, GrantsPerSec: 720, HoldNs: 1.1e6},
		{Round: 3, GrantsPerSec: 710, HoldNs: 1.1e6},
	}
	dl := roundsRow("dl", KindDlock, Handoff, figs...)
	// Hot: the floor's release 20 µs + the round trip's 20 µs.
	floor := roundsRow("floor", KindFloor, Uncontended, uses(50_000, 50_000, 50_000, 50_000)...)
	floor.P50, floor.ReleaseP50 = 30_000, 20_000
	rtt := roundsRow("rtt", KindRTT, Uncontended, uses(20_000, 20_000, 20_000, 20_000)...)
	paced := []*Paced{
		// Round 1 is slow for everything; round 3 has no paced floor.
		{Backend: "floor", Kind: KindFloor, HoldNs: 1e6, Rounds: []PacedRound{
			{Round: 0, P50Ns: 60_000}, {Round: 1, P50Ns: 150_000}, {Round: 2, P50Ns: 70_000}}},
		{Backend: "rtt", Kind: KindRTT, HoldNs: 1e6, Rounds: []PacedRound{
			{Round: 0, P50Ns: 40_000}, {Round: 1, P50Ns: 50_000}, {Round: 2, P50Ns: 50_000}, {Round: 3, P50Ns: 50_000}}},
		// Those of another hold are not this row's.
		{Backend: "floor", Kind: KindFloor, HoldNs: 0, Rounds: []PacedRound{
			{Round: 0, P50Ns: 1e6}, {Round: 1, P50Ns: 1e6}, {Round: 2, P50Ns: 1e6}, {Round: 3, P50Ns: 1e6}}},
	}
	Finalize([]*Row{dl, floor, rtt}, pairTargets, paced)
	// 32 clients ask for more than one name can give: 1/(hold + gap).
	gaps := []float64{100e3, 200e3, 120e3, 40e3}
	var want, ratios []float64
	for i, f := range figs {
		v := 1 / ((f.HoldNs + gaps[i]) / 1e9)
		want, ratios = append(want, v), append(ratios, f.GrantsPerSec/v)
	}
	wantIdeal := stats.MedianCI(want, Confidence)
	wantRatio := stats.MedianCI(ratios, Confidence)
	if dl.Ideal == nil || !near(dl.Ideal.Median, wantIdeal.Median) || !near(dl.Ideal.Lo, wantIdeal.Lo) {
		t.Errorf("ideal = %+v; want %+v (per round 1/(hold + paced release + paced round trip))", dl.Ideal, wantIdeal)
	}
	if dl.ToIdeal == nil || !near(dl.ToIdeal.Median, wantRatio.Median) {
		t.Errorf("×ideal = %+v; want %+v, paired per round", dl.ToIdeal, wantRatio)
	}
	if g := stats.MedianCI(gaps, Confidence); dl.IdealGap == nil || dl.IdealGap.Median != g.Median || dl.IdealGap.Rounds != 4 {
		t.Errorf("ideal gap = %+v; want %+v", dl.IdealGap, g)
	}
	if dl.IdealGapHot != 40_000 {
		t.Errorf("hot gap = %d ns; want the tight floor release + round trip, 40000", dl.IdealGapHot)
	}
	hot := 1 / (1.1e-3 + 40e-6)
	if dl.IdealHot == nil || !near(dl.IdealHot.Median, hot) || dl.ToIdealHot == nil || !near(dl.ToIdealHot.Median, 710/hot) {
		t.Errorf("hot ideal = %+v, ×hot ideal %+v; want %.1f/s and %.3f", dl.IdealHot, dl.ToIdealHot, hot, 710/hot)
	}
	b, err := json.Marshal(dl)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"ideal_gap_ns":{`, `"ideal_gap_hot_ns":40000`, `"ideal_hot_grants_per_sec":{`, `"ratio_to_ideal_hot":{`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("row's JSON lacks %s: %s", key, b)
		}
	}

	// Paced references alone (no uncontended rows: -workload handoff)
	// make the ideal; the hot one is then unknown.
	alone := roundsRow("dl", KindDlock, Handoff, figs[:3]...)
	Finalize([]*Row{alone}, pairTargets, paced)
	if alone.Ideal == nil || alone.Ideal.Rounds != 3 || alone.IdealHot != nil || alone.IdealGapHot != 0 {
		t.Errorf("paced only: ideal %+v, hot ideal %+v, hot gap %d; want 3 rounds of the paced ideal and no hot one", alone.Ideal, alone.IdealHot, alone.IdealGapHot)
	}
}
