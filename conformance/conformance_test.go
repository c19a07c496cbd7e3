package conformance_test

import (
	"context"
	"errors"
	"slices"
	"strings"
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

// onlySemaphores skips every case but the semaphore ones: the lock cases
// of the memory driver under the wrappers are the memory driver's.
func onlySemaphores() conformance.Option {
	var locks []string
	for _, c := range conformance.Cases() {
		if !strings.HasPrefix(c.Name, "Semaphore") {
			locks = append(locks, c.Name)
		}
	}
	return conformance.WithSkip("a lock case: the semaphore wrappers change nothing of locks", locks...)
}

// The semaphore wrapper without a flaw passes: every failure of a flawed
// one below is due to its flaw.
func TestCorrectSemaphoreDriverPasses(t *testing.T) {
	t.Parallel()
	conformance.Run(t, semMaker(semFlaws{}), onlySemaphores())
}

// Each broken semaphore must fail the cases that name its flaw, and no
// case but those and the ones listed as also seeing it (a case that fills
// a semaphore to check its own rule sees a driver that admits one more; a
// case that checks tokens on the way sees tokens that repeat): a flaw
// caught by an unlisted case would mean a rule is checked by accident.
func TestBrokenSemaphoresAreCaught(t *testing.T) {
	t.Parallel()
	type broken struct {
		name string
		f    semFlaws
		want []string // must fail
		also []string // may fail too
		rep  chan *conformance.Report
	}
	all := []*broken{
		{name: "AdmitsNPlusOne", f: semFlaws{admitsExtra: true},
			// A semaphore of one permit admitting two is a broken lock.
			want: []string{"SemaphoreLimit", "SemaphoreOnePermit"},
			also: []string{"SemaphoreCrashFreesPermit", "SemaphoreCancelLeavesNothing", "SemaphoreWakes", "SemaphoreMismatchedPermits", "SemaphoreLockIndependent"}},
		{name: "TokensPerClient", f: semFlaws{tokensPerClient: true},
			want: []string{"SemaphoreFencing"},
			// SemaphoreLimit's history is checked against the fenced model.
			also: []string{"SemaphoreLimit", "SemaphoreCrashFreesPermit", "SemaphoreOnePermit"}},
		{name: "NumberInTheName", f: semFlaws{nInName: true},
			want: []string{"SemaphoreMismatchedPermits"}},
		{name: "WaiterLeftBehind", f: semFlaws{ghostWaiter: true},
			want: []string{"SemaphoreCancelLeavesNothing"}},
		{name: "ClaimsQueuePollsSlowly", f: semFlaws{slowWake: true},
			want: []string{"SemaphoreWakes"},
			// A queue notices an expired permit at once too.
			also: []string{"SemaphoreCrashFreesPermit"}},
		{name: "DeadHolderNeverFreed", f: semFlaws{neverExpires: true},
			want: []string{"SemaphoreCrashFreesPermit"}},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	for _, b := range all {
		b.rep = make(chan *conformance.Report, 1)
		go func() {
			b.rep <- conformance.Evaluate(ctx, semMaker(b.f), conformance.WithTTL(500*time.Millisecond), conformance.WithReportDir(dir), onlySemaphores())
		}()
	}
	for _, b := range all {
		t.Run(b.name, func(t *testing.T) {
			rep := <-b.rep
			failed := rep.Failed()
			t.Logf("failed: %v", failed)
			for _, w := range b.want {
				if !slices.Contains(failed, w) {
					t.Errorf("the case %s did not catch the flaw %s", w, b.name)
				}
			}
			for _, f := range failed {
				if !slices.Contains(b.want, f) && !slices.Contains(b.also, f) {
					t.Errorf("the case %s failed on the flaw %s, which it does not check", f, b.name)
				}
			}
			if t.Failed() {
				t.Fatalf("the report:\n%v", rep.Err())
			}
			for _, w := range b.want {
				res, _ := rep.Case(w)
				t.Logf("%s: %q", w, res.Errors)
			}
		})
	}
}
