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
// measured after the hold (the rounds take at least their sleeps), once
// per round and hold (a second configuration with the same hold in the
// same round measures nothing more), and a configuration without a hold
// measures its tight figures.
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
	start := time.Now()
	for round := range rounds {
		p.Measure(ctx, refs, hold, round)
		p.Measure(ctx, refs, hold, round) // the round's next configuration
	}
	// Every timed operation sleeps the hold first: a bound from below,
	// not a timing assertion.
	if least := time.Duration(len(refs)*rounds*PacedSamples) * hold; time.Since(start) < least {
		t.Errorf("%d references × %d rounds took %v; pacing them takes at least %v", len(refs), rounds, time.Since(start), least)
	}
	p.Measure(ctx, refs, 0, 0)
	got := p.References()
	if len(got) != 2*len(refs) {
		t.Fatalf("%d references; want %d (%d per hold)", len(got), 2*len(refs), len(refs))
	}
	for _, r := range got {
		wantRounds := rounds
		if r.HoldNs == 0 {
			wantRounds = 1
		} else if r.HoldNs != int64(hold) {
			t.Errorf("%s: paced by %v; want %v or none", r.Backend, time.Duration(r.HoldNs), hold)
		}
		if r.LastError != "" || len(r.Rounds) != wantRounds || r.Server != "redis" {
			t.Errorf("%s paced by %v: %+v; want %d rounds without errors", r.Backend, time.Duration(r.HoldNs), r, wantRounds)
			continue
		}
		for i, pr := range r.Rounds {
			if pr.Round != i || pr.P50Ns <= 0 || pr.Samples != PacedSamples || pr.ElapsedNs < int64(PacedSamples)*r.HoldNs {
				t.Errorf("%s paced by %v, round %d: %+v", r.Backend, time.Duration(r.HoldNs), i, pr)
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
	ctx := ctxT(t, time.Minute)
	p.Measure(ctx, refs[:1], 0, 0)
	p.Measure(ctx, refs[:1], 0, 1)
	got := p.References()
	if len(got) != 1 || len(got[0].Rounds) != 0 || !strings.HasPrefix(got[0].LastError, "round 2: ") {
		t.Fatalf("references of a server that is down: %+v; want one, no rounds, the second round's error", got)
	}
}
