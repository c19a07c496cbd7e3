package faults

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

func lease(client int, granted, end int64, how string) *LeaseRec {
	return &LeaseRec{Client: client, Seq: 1, Token: uint64(granted), Called: granted, Granted: granted, End: end, EndHow: how,
		Signalled: -1, DoneAt: -1, Deadline: -1, relCall: -1}
}

// TestAnalyse checks the raw-mutex, loss-signal and recovery measures on a
// history written by hand.
func TestAnalyse(t *testing.T) {
	ms := int64(time.Millisecond)
	a := lease(1, 0, 100*ms, "released")
	b := lease(2, 150*ms, 380*ms, "lost") // lost, deadline passed before c's grant
	b.DoneKind, b.DoneAt, b.Deadline = kindLost, 400*ms, 380*ms
	c := lease(3, 390*ms, 450*ms, "released")
	d := lease(4, 500*ms, 600*ms, "released") // lost, found out only at release
	d.ReleaseKind = kindNotHeld
	e := lease(5, 550*ms, 650*ms, "released")  // overlaps d by 50ms
	f := lease(6, 900*ms, 1000*ms, "released") // after the kill at 700ms
	h := &History{
		Leases: []*LeaseRec{a, b, c, d, e, f},
		Events: []Event{{At: 700 * ms, Fault: "kill", Client: 9, recover: true}},
		End:    2000 * ms, Injections: 1,
	}
	caps := driver.Capabilities{ReleaseOnCrash: driver.ReleaseAfterTTL}
	cfg := Config{Target: &Target{Backend: "test", Caps: caps}, Fault: FaultByName("kill"), TTL: 100 * time.Millisecond}
	res := analyse(h, cfg)
	if res.Overlaps != 1 || res.LongestOverlap != 50*time.Millisecond {
		t.Errorf("overlaps = %d longest %v, want 1 and 50ms", res.Overlaps, res.LongestOverlap)
	}
	if res.Lost != 2 || res.Signalled != 1 {
		t.Errorf("lost %d signalled %d, want 2 and 1", res.Lost, res.Signalled)
	}
	if len(res.Recoveries) != 1 || res.Recoveries[0] != 200*time.Millisecond {
		t.Errorf("recoveries %v, want [200ms]", res.Recoveries)
	}
	if len(res.Failures) == 0 {
		t.Error("an unsignalled loss under a kill fault must be a failure")
	}

	// The same loss under a fault documented unsafe is reported, not failed.
	cfg.Fault = FaultByName("failover")
	res = analyse(h, cfg)
	for _, f := range res.Failures {
		t.Errorf("unsafe fault: unexpected failure %q", f)
	}
}

// TestFencedOps checks the conversion to the conformance checker: a killed
// holder followed by a grant with a higher token is legal; a token that
// goes backwards is a violation.
func TestFencedOps(t *testing.T) {
	mk := func(third uint64) *History {
		h := &History{
			Ops: []Op{
				{Client: 1, Kind: "acquire", Lease: 1, Call: 0, Return: 10, OK: true, Token: 1},
				{Client: 1, Kind: "write", Lease: 1, Call: 11, Return: 11, OK: true, Token: 1},
				{Client: 1, Kind: "release", Lease: 1, Call: 12, Return: 13, OK: true, Token: 1},
				{Client: 2, Kind: "acquire", Lease: 1, Call: 14, Return: 15, OK: true, Token: 2},
				{Client: 2, Kind: "write", Lease: 1, Call: 16, Return: 16, OK: true, Token: 2},
				// client 2 is killed holding the lock; client 3 gets it later
				{Client: 3, Kind: "acquire", Lease: 1, Call: 20, Return: 40, OK: true, Token: third},
				{Client: 3, Kind: "write", Lease: 1, Call: 41, Return: 41, OK: third >= 2, Token: third},
			},
			Leases: []*LeaseRec{
				lease(1, 10, 12, "released"), lease(2, 15, 30, "killed"), lease(3, 40, -1, "open"),
			},
			End: 50,
		}
		h.Leases[0].Token, h.Leases[1].Token, h.Leases[2].Token = 1, 2, third
		return h
	}
	cfg := Config{Target: &Target{Backend: "test", Caps: driver.Capabilities{Fencing: true}}, Fault: FaultByName("kill"), Dir: t.TempDir()}
	if res := analyse(mk(3), cfg); res.FencedViolations != 0 {
		t.Errorf("legal history: %d fenced violations (%s)", res.FencedViolations, res.FencedNote)
	}
	res := analyse(mk(1), cfg)
	if res.FencedViolations != 1 {
		t.Errorf("token going backwards: %d fenced violations, want 1", res.FencedViolations)
	}
	if res.Visualization == "" {
		t.Error("no visualisation written for the failing history")
	}
	if len(res.Failures) == 0 {
		t.Error("a fenced violation on a fencing backend must fail the run")
	}
}

// TestAnalyseSemaphore checks a semaphore run's measures on a history
// written by hand: three believed holders of a semaphore of two is one raw
// overlap, and a third grant while two hold is a fenced violation.
func TestAnalyseSemaphore(t *testing.T) {
	ms := int64(time.Millisecond)
	a := lease(1, 0, 300*ms, "released")
	b := lease(2, 100*ms, 200*ms, "released")
	c := lease(3, 250*ms, 400*ms, "released") // a and c: two of two
	d := lease(4, 280*ms, 500*ms, "released") // a, c and d: over by 20ms
	mk := func(third bool) *History {
		ops := []Op{
			{Client: 1, Kind: "acquire", Lease: 1, Call: 0, Return: 0, OK: true, Token: 1},
			{Client: 2, Kind: "acquire", Lease: 1, Call: 90 * ms, Return: 100 * ms, OK: true, Token: 2},
			{Client: 2, Kind: "release", Lease: 1, Call: 200 * ms, Return: 210 * ms, OK: true, Token: 2},
			{Client: 3, Kind: "acquire", Lease: 1, Call: 240 * ms, Return: 250 * ms, OK: true, Token: 3},
			{Client: 1, Kind: "release", Lease: 1, Call: 300 * ms, Return: 310 * ms, OK: true, Token: 1},
			{Client: 3, Kind: "release", Lease: 1, Call: 400 * ms, Return: 410 * ms, OK: true, Token: 3},
		}
		leases := []*LeaseRec{a, b, c}
		if third {
			ops = append(ops,
				Op{Client: 4, Kind: "acquire", Lease: 1, Call: 270 * ms, Return: 280 * ms, OK: true, Token: 4},
				Op{Client: 4, Kind: "release", Lease: 1, Call: 500 * ms, Return: 510 * ms, OK: true, Token: 4})
			leases = append(leases, d)
		}
		return &History{Ops: ops, Leases: leases, End: 600 * ms}
	}
	a.Token, b.Token, c.Token, d.Token = 1, 2, 3, 4
	cfg := Config{Target: &Target{Backend: "test", Caps: driver.Capabilities{Fencing: true}}, Dir: t.TempDir(), Permits: 2}
	res := analyse(mk(false), cfg)
	if res.Overlaps != 0 || res.FencedViolations != 0 || len(res.Failures) != 0 {
		t.Errorf("two of two: overlaps %d, fenced violations %d, failures %v", res.Overlaps, res.FencedViolations, res.Failures)
	}
	res = analyse(mk(true), cfg)
	if res.Overlaps != 1 || res.LongestOverlap != 20*time.Millisecond {
		t.Errorf("three of two: overlaps %d longest %v, want 1 and 20ms", res.Overlaps, res.LongestOverlap)
	}
	if res.FencedViolations != 1 || len(res.Failures) == 0 {
		t.Errorf("three of two: fenced violations %d, failures %v; want 1 and a failure", res.FencedViolations, res.Failures)
	}
	if got := res.Name(); got != "test sem×2" {
		t.Errorf("Name() = %q", got)
	}
}
