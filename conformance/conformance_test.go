package conformance_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/conformance"
)

// The flawless variant of the test driver passes: every failure of a
// flawed variant below is due to its flaw.
func TestCorrectDriverPasses(t *testing.T) {
	t.Parallel()
	conformance.Run(t, brokenMaker(flaws{}))
}

// Each deliberately broken driver must fail Check, and the case named for
// its flaw must be among the failures.
func TestBrokenDriversAreCaught(t *testing.T) {
	t.Parallel()
	type broken struct {
		name string
		f    flaws
		want string
		err  chan error
	}
	all := []*broken{
		{name: "ReleaseWithoutOwnerCheck", f: flaws{noOwnerCheck: true}, want: "ReleaseSemantics"},
		{name: "ExpirySetInSecondStep", f: flaws{twoStepExpiry: true}, want: "KeepAlive"},
		{name: "NoExpiry", f: flaws{noExpiry: true}, want: "KeepAlive"},
		{name: "TokensRepeat", f: flaws{badTokens: true}, want: "FencingMonotonic"},
		{name: "TryAcquireWaits", f: flaws{tryWaits: true}, want: "TryAcquireHeld"},
		{name: "AcquireIgnoresContext", f: flaws{acquireIgnoresCtx: true}, want: "AcquireHonoursContext"},
		{name: "LossNeverSignalled", f: flaws{lossUnsignalled: true}, want: "LossSignalled"},
		{name: "WaiterLeftBehind", f: flaws{ghostWaiter: true}, want: "AcquireHonoursContext"},
		{name: "ReentrancyWithoutCount", f: flaws{ownerNoCount: true}, want: "Reentrancy"},
		{name: "LazyExpiryGrantsTwice", f: flaws{lazyOrphan: true}, want: "ExpiryHandOver"},
		{name: "ClaimsFairnessGrantsLIFO", f: flaws{lifo: true}, want: "Fairness"},
		{name: "LongTTLTruncated", f: flaws{truncatedTTL: true}, want: "TTLRange"},
		{name: "ServerKeepsEndedLease", f: flaws{coarseExpiry: true}, want: "TTLRange"},
		{name: "HolderIsTheClient", f: flaws{perClient: true}, want: "SameLockerContention"},
	}
	// The suites mostly sleep: run them all at once (t.Parallel would run
	// only GOMAXPROCS of them at a time).
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	for _, b := range all {
		b.err = make(chan error, 1)
		// A short TTL: a flaw fails its case whatever the timing.
		go func() {
			b.err <- conformance.Check(ctx, brokenMaker(b.f), conformance.WithTTL(500*time.Millisecond), conformance.WithRounds(2), conformance.WithReportDir(dir))
		}()
	}
	for _, b := range all {
		t.Run(b.name, func(t *testing.T) {
			err := <-b.err
			if err == nil {
				t.Fatalf("Check passed a driver whose flaw is %s", b.name)
			}
			var rep *conformance.Report
			if !errors.As(err, &rep) {
				t.Fatalf("Check returned %T, want a *conformance.Report", err)
			}
			failed := rep.Failed()
			t.Logf("failed: %v; skipped: %v", failed, rep.Skipped())
			if !slices.Contains(failed, b.want) {
				t.Fatalf("the case %s did not catch the flaw %s; the failures:\n%v", b.want, b.name, err)
			}
			var ce *conformance.CaseError
			if !errors.As(err, &ce) || ce.Rule == "" {
				t.Errorf("the report does not unwrap to a *CaseError quoting its rule")
			}
			res, _ := rep.Case(b.want)
			t.Logf("%s: %q", b.want, res.Errors)
		})
	}
}

// A case whose hook is missing is skipped, not passed, and WithSkip skips.
func TestSkippedIsNotPassed(t *testing.T) {
	t.Parallel()
	rep := conformance.Evaluate(t.Context(), brokenMaker(flaws{}),
		conformance.WithSkip("not under test here", "MutualExclusion", "KeepAlive", "RefreshSemantics",
			"LossSignalled", "ReleaseSemantics", "FencingMonotonic", "Close", "AcquireHonoursContext"))
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	skipped := rep.Skipped()
	for _, want := range []string{"CrossProcessCrash", "PausedHolderFenced", "Fairness", "KeepAlive"} {
		if !slices.Contains(skipped, want) {
			t.Errorf("%s is not reported skipped (skipped: %v)", want, skipped)
		}
		if slices.Contains(rep.Passed(), want) {
			t.Errorf("%s is reported passed", want)
		}
	}
	if res, _ := rep.Case("Fairness"); res.SkipReason == "" {
		t.Errorf("a skipped case has no reason")
	}
}
