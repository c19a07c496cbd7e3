package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPacedTargets: the references of a configuration are the floors and
// round trips its contending targets name, no others.
func TestPacedTargets(t *testing.T) {
	all := []Target{
		{Name: "dl", Kind: KindDlock, Floor: "floor", RTT: "rtt"},
		{Name: "floor", Kind: KindFloor, RTT: "rtt"},
		{Name: "floor other", Kind: KindFloor, RTT: "rtt"},
		{Name: "rtt", Kind: KindRTT},
		{Name: "rtt other", Kind: KindRTT},
		MemoryTarget(),
	}
	var got []string
	for _, r := range PacedTargets([]Target{all[0], all[5]}, all) {
		got = append(got, r.Name)
	}
	if !slices.Equal(got, []string{"floor", "rtt"}) {
		t.Errorf("references = %q; want the floor and round trip dl names", got)
	}
}

// TestPacerOnRedis measures the paced references of dlock's Redis target
// on a real server in two rounds: each reference gets a figure per round,
// measured after the hold (the rounds take at least their sleeps), and a
// configuration without a hold measures its tight figures.
func TestPacerOnRedis(t *testing.T) {
	_, all, dl := redisTargets(t, "redis", "redislock")
	refs := PacedTargets(dl, all)
	var names []string
	for _, r := range refs {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"floor redis", "floor redis unfenced", "rtt redis"}) {
		t.Fatalf("references = %q; want redis's floor, the peers' unfenced floor and the round trip", names)
	}
	ctx := ctxT(t, time.Minute)
	p := NewPacer()
	defer p.Close()
	const hold, rounds = 2 * time.Millisecond, 2
	w := Workload{Kind: Handoff, Clients: 8, Names: 1, Hold: hold, Work: 2 * time.Millisecond}
	start := time.Now()
	for round := range rounds {
		p.Measure(ctx, refs, w, round)
	}
	// Every timed operation sleeps the hold first: a bound from below,
	// not a timing assertion.
	if least := time.Duration(len(refs)*rounds*PacedSamples) * hold; time.Since(start) < least {
		t.Errorf("%d references × %d rounds took %v; pacing them takes at least %v", len(refs), rounds, time.Since(start), least)
	}
	tight := w
	tight.Hold = 0
	p.Measure(ctx, refs, tight, 0)
	got := p.References()
	if len(got) != 2*len(refs) {
		t.Fatalf("%d references; want %d (%d per configuration)", len(got), 2*len(refs), len(refs))
	}
	for _, r := range got {
		wantRounds, wantHold := rounds, int64(hold)
		if r.Label == tight.Label() {
			wantRounds, wantHold = 1, 0
		} else if r.Label != w.Label() {
			t.Errorf("%s: label %q; want %q or %q", r.Backend, r.Label, w.Label(), tight.Label())
		}
		if r.LastError != "" || len(r.Rounds) != wantRounds || r.HoldNs != wantHold || r.Server != "redis" {
			t.Errorf("%s on %q: %+v; want %d rounds paced by %v without errors", r.Backend, r.Label, r, wantRounds, time.Duration(wantHold))
			continue
		}
		for i, pr := range r.Rounds {
			if pr.Round != i || pr.P50Ns <= 0 || pr.Samples != PacedSamples || pr.ElapsedNs < int64(PacedSamples)*wantHold {
				t.Errorf("%s on %q round %d: %+v", r.Backend, r.Label, i, pr)
			}
		}
	}
}

// TestPacerRecordsFailures: a reference that cannot be measured (its
// server is down) records why, has no figure for the round, and is tried
// again the next round.
func TestPacerRecordsFailures(t *testing.T) {
	s := &Server{ID: "down", Backend: "redis", URL: "redis://127.0.0.1:1/0"}
	all, _ := TargetsFor(s)
	refs := PacedTargets(all, all)
	if len(refs) == 0 {
		t.Fatal("no references for a Redis server")
	}
	p := NewPacer()
	defer p.Close()
	w := Workload{Kind: Handoff, Clients: 8, Names: 1}
	ctx := ctxT(t, time.Minute)
	p.Measure(ctx, refs[:1], w, 0)
	p.Measure(ctx, refs[:1], w, 1)
	got := p.References()
	if len(got) != 1 || len(got[0].Rounds) != 0 || !strings.HasPrefix(got[0].LastError, "round 2: ") {
		t.Fatalf("references of a server that is down: %+v; want one, no rounds, the second round's error", got)
	}
}
