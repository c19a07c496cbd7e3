package faults

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

func lease(client int, granted, end int64, how string) *LeaseRec {
	return &LeaseRec{Client: client, Seq: 1, Token: uint64(granted), Granted: granted, End: end, EndHow: how,
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
