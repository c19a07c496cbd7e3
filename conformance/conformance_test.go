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
	for _, tc := range []struct {
		name string
		f    flaws
		want string
	}{
		{"ReleaseWithoutOwnerCheck", flaws{noOwnerCheck: true}, "ReleaseSemantics"},
		{"ExpirySetInSecondStep", flaws{twoStepExpiry: true}, "KeepAlive"},
		{"NoExpiry", flaws{noExpiry: true}, "KeepAlive"},
		{"TokensRepeat", flaws{badTokens: true}, "FencingMonotonic"},
		{"TryAcquireWaits", flaws{tryWaits: true}, "TryAcquireHeld"},
		{"AcquireIgnoresContext", flaws{acquireIgnoresCtx: true}, "AcquireHonoursContext"},
		{"LossNeverSignalled", flaws{lossUnsignalled: true}, "LossSignalled"},
		{"WaiterLeftBehind", flaws{ghostWaiter: true}, "AcquireHonoursContext"},
		{"ReentrancyWithoutCount", flaws{ownerNoCount: true}, "Reentrancy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			err := conformance.Check(ctx, brokenMaker(tc.f), conformance.WithReportDir(t.TempDir()))
			if err == nil {
				t.Fatalf("Check passed a driver whose flaw is %s", tc.name)
			}
			var rep *conformance.Report
			if !errors.As(err, &rep) {
				t.Fatalf("Check returned %T, want a *conformance.Report", err)
			}
			failed := rep.Failed()
			t.Logf("failed: %v; skipped: %v", failed, rep.Skipped())
			if !slices.Contains(failed, tc.want) {
				t.Fatalf("the case %s did not catch the flaw %s; the failures:\n%v", tc.want, tc.name, err)
			}
			var ce *conformance.CaseError
			if !errors.As(err, &ce) || ce.Rule == "" {
				t.Errorf("the report does not unwrap to a *CaseError quoting its rule")
			}
			res, _ := rep.Case(tc.want)
			t.Logf("%s: %v", tc.want, res.Errors)
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
