package faults

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Result is what one run measured.
type Result struct {
	Backend string `json:"backend"`
	Fault   string `json:"fault"`
	Clients int    `json:"clients"`
	// Permits is the semaphore's number of permits in a semaphore run
	// (0: a lock run).
	Permits int `json:"permits,omitempty"`
	// TTL and Duration of the run.
	TTL      time.Duration `json:"ttl_ns"`
	Duration time.Duration `json:"duration_ns"`
	// Injections counts the faults injected.
	Injections int `json:"injections"`
	// Ops counts the calls recorded (acquire, release, write).
	Ops    int `json:"ops"`
	Grants int `json:"grants"`
	// Writes to the fenced register, and how many it rejected.
	Writes         int `json:"writes"`
	WritesRejected int `json:"writes_rejected"`

	// FencedViolations is the number of violations the fenced-mutex
	// checker found (-1: not checked; FencedNote says why).
	FencedViolations int `json:"fenced_violations"`
	// Fencing is the backend's Capabilities.Fencing: without it only the
	// mutex part is checked and violations are not failures.
	Fencing    bool   `json:"fencing"`
	FencedNote string `json:"fenced_note,omitempty"`
	// Visualization is the file with porcupine's visualisation of a
	// failing history ("" when none).
	Visualization string `json:"visualization,omitempty"`

	// Overlaps counts pairs of grants whose holders both believed they
	// held the lock at the same time (the raw history as a plain mutex),
	// and LongestOverlap the longest such window.
	Overlaps       int           `json:"raw_overlaps"`
	LongestOverlap time.Duration `json:"raw_longest_overlap_ns"`

	// Recoveries are the times from a holder's death (kill, pause) to the
	// next grant; RecoveryMissing counts deaths with no grant before the
	// run ended. RecoveryBound is the backend's stated bound and
	// RecoverySlack what waiters are allowed on top to notice.
	Recoveries      []time.Duration `json:"recoveries_ns"`
	RecoveryP50     time.Duration   `json:"recovery_p50_ns"`
	RecoveryMax     time.Duration   `json:"recovery_max_ns"`
	RecoveryMissing int             `json:"recovery_missing"`
	RecoveryBound   time.Duration   `json:"recovery_bound_ns"`
	RecoverySlack   time.Duration   `json:"recovery_slack_ns"`
	// RecoveryAsserted: the bound applies to this fault on this backend.
	RecoveryAsserted bool `json:"recovery_asserted"`

	// Lost counts leases that the server dropped before their holder
	// released them (Done closed with ErrLockLost, or the release found
	// the lock no longer held) and that were followed by another grant;
	// Signalled those whose holder knew of the loss (Done closed or its
	// local deadline passed), or had already let go, before that grant.
	Lost      int `json:"lost"`
	Signalled int `json:"signalled"`
	// SignalExpected: the backend promises it for this fault (else
	// SignalNote says why not).
	SignalExpected bool   `json:"signal_expected"`
	SignalNote     string `json:"signal_note,omitempty"`
	Unsafe         bool   `json:"unsafe"`

	// Violations are the broken promises that the fault observed itself
	// (Injection.Violation).
	Violations []string `json:"violations,omitempty"`

	// Failures are the assertions of the suite that this run broke.
	Failures []string `json:"failures,omitempty"`
	// ClientErrors counts calls that failed with something other than the
	// lock being held (network, timeouts), a measure of the fault's bite.
	ClientErrors int `json:"client_errors"`

	History *History `json:"-"`
}

// slack is what waiters get on top of the backend's stated crash bound to
// notice that the lock is free (a watch fallback timer, a poll).
func slack(ttl time.Duration) time.Duration { return max(time.Second, ttl) }

// analyse checks a finished run.
func analyse(h *History, cfg Config) *Result {
	res := &Result{
		Backend: cfg.Target.Backend, Clients: cfg.Clients, TTL: cfg.TTL, Duration: cfg.Duration,
		History: h, FencedViolations: -1, Fencing: cfg.Target.Caps.Fencing,
		Permits: cfg.Permits,
	}
	if f := cfg.Fault; f != nil {
		res.Fault, res.Unsafe = f.Name, f.Unsafe
		res.SignalExpected, res.SignalNote = f.Expected(cfg.Target.Caps)
	} else {
		res.Fault, res.SignalExpected = "none", true
	}
	countOps(h, res)
	leases := slices.Clone(h.Leases)
	sort.SliceStable(leases, func(i, j int) bool { return leases[i].Granted < leases[j].Granted })
	if cfg.Permits > 0 {
		// Which grant took a lost or dead holder's permit is not known
		// with N permits: the raw overlaps (more than N believed
		// holders) and the fenced semaphore model say what matters;
		// the conformance suite checks the crash bound.
		countSemOverlaps(h, res, leases, cfg.Permits)
		res.SignalExpected = false
		res.SignalNote = "semaphore run: see raw overlaps (more than N holders)"
	} else {
		countOverlaps(h, res, leases)
		countLosses(res, leases)
		measureRecoveries(h, res, leases, cfg)
	}
	checkFenced(h, res, cfg.Target.Caps.Fencing, cfg.Permits, cfg.Dir, cfg.checkTimeout())
	res.Failures = failures(res)
	return res
}

// countOps counts the injections, calls, writes, grants, client errors and
// the violations the fault observed itself.
func countOps(h *History, res *Result) {
	res.Injections = h.Injections
	res.Ops = len(h.Ops)
	res.Grants = len(h.Leases)
	for _, e := range h.Events {
		if e.Violation {
			res.Violations = append(res.Violations, e.Detail)
		}
	}
	for _, op := range h.Ops {
		switch {
		case op.Kind == "write":
			res.Writes++
			if !op.OK {
				res.WritesRejected++
			}
		case op.Return >= 0 && !op.OK && op.ErrKind != kindNotAcquired && op.ErrKind != kindTimeout:
			res.ClientErrors++
		}
	}
}

// countOverlaps reads the raw history as a plain mutex: pairs of grants
// (leases, by grant time) whose holders both believed they held the lock.
func countOverlaps(h *History, res *Result, leases []*LeaseRec) {
	end := func(l *LeaseRec) int64 {
		if l.End < 0 {
			return h.End
		}
		return l.End
	}
	for i, a := range leases {
		for _, b := range leases[i+1:] {
			if b.Granted >= end(a) {
				break
			}
			res.Overlaps++
			d := time.Duration(min(end(a), end(b)) - b.Granted)
			res.LongestOverlap = max(res.LongestOverlap, d)
		}
	}
}

// countSemOverlaps reads the raw history of a semaphore run: the grants
// (leases, by grant time) that made more than n holders believe they held
// a permit at once, and the longest such window.
func countSemOverlaps(h *History, res *Result, leases []*LeaseRec, n int) {
	end := func(l *LeaseRec) int64 {
		if l.End < 0 {
			return h.End
		}
		return l.End
	}
	for i, a := range leases {
		// The holders at a's grant: earlier grants not yet ended.
		var ends []int64
		for _, b := range leases[:i] {
			if e := end(b); e > a.Granted {
				ends = append(ends, e)
			}
		}
		if len(ends) < n {
			continue
		}
		res.Overlaps++
		// Over n until all but n-1 of them ended (or a ends).
		slices.Sort(ends)
		over := min(ends[len(ends)-n], end(a))
		res.LongestOverlap = max(res.LongestOverlap, time.Duration(over-a.Granted))
	}
}

// countLosses marks the leases (by grant time) the server dropped, and
// counts those followed by another grant and those whose loss was
// signalled before it.
func countLosses(res *Result, leases []*LeaseRec) {
	for i, l := range leases {
		switch {
		case l.DoneKind == kindLost:
			l.Lost = true
			l.Signalled = l.DoneAt
			if l.Deadline >= 0 && l.Deadline < l.Signalled {
				l.Signalled = l.Deadline
			}
		case l.ReleaseKind == kindNotHeld:
			l.Lost = true // found out only when releasing
		}
		if !l.Lost || i+1 == len(leases) {
			continue
		}
		// The holder is safe when it knew of the loss, or had already let
		// go (called release), before the next grant: End is the earlier
		// of the two. On a TTL-bound backend the lease's local deadline
		// is the signal the portable layer promises: a paused process
		// cannot run the timer that closes Done, but its deadline passed.
		next := leases[i+1]
		res.Lost++
		sig := l.End
		if l.Deadline >= 0 && (sig < 0 || l.Deadline < sig) {
			sig = l.Deadline
		}
		if sig >= 0 && sig <= next.Granted {
			res.Signalled++
		}
	}
}

// measureRecoveries measures the time from each holder's death to the next
// grant (leases, by grant time), against the backend's bound.
func measureRecoveries(h *History, res *Result, leases []*LeaseRec, cfg Config) {
	f, caps := cfg.Fault, cfg.Target.Caps
	paused := f != nil && (f.Name == "pause" || f.Name == "mixed")
	res.RecoveryBound = crashBound(caps, cfg.TTL)
	if paused && !caps.SessionBound {
		// A paused holder's connection stays open: a TTL-bound lease is
		// freed by its TTL even where a dead holder's is freed at once.
		res.RecoveryBound = max(res.RecoveryBound, cfg.TTL)
	}
	res.RecoverySlack = slack(cfg.TTL)
	res.RecoveryAsserted = f != nil && (f.Name == "kill" || (paused && !caps.SessionBound))
	for _, e := range h.Events {
		if !e.recover {
			continue
		}
		found := false
		for _, l := range leases {
			if l.Granted > e.At && l != e.victim {
				res.Recoveries = append(res.Recoveries, time.Duration(l.Granted-e.At))
				found = true
				break
			}
		}
		// A death too close to the end of the run to have been followed
		// by a grant within the bound proves nothing.
		if !found && time.Duration(h.End-e.At) > res.RecoveryBound+res.RecoverySlack {
			res.RecoveryMissing++
		}
	}
	if n := len(res.Recoveries); n > 0 {
		s := slices.Clone(res.Recoveries)
		slices.Sort(s)
		res.RecoveryP50, res.RecoveryMax = s[(n-1)/2], s[n-1]
	}
}

// failures lists what the short mode asserts and this run broke.
func failures(r *Result) []string {
	out := slices.Clone(r.Violations)
	// Without fencing (Capabilities.Fencing false: Redlock) nothing stops a
	// paused holder's late write, so violations are reported, not failed.
	if r.FencedViolations > 0 && !r.Unsafe && r.Fencing {
		out = append(out, fmt.Sprintf("%d fenced violations", r.FencedViolations))
	}
	if r.SignalExpected && r.Signalled < r.Lost {
		out = append(out, fmt.Sprintf("%d of %d lost leases were not signalled before the next grant", r.Lost-r.Signalled, r.Lost))
	}
	if r.RecoveryAsserted {
		lim := r.RecoveryBound + r.RecoverySlack
		if r.RecoveryMax > lim {
			out = append(out, fmt.Sprintf("recovery took %v, more than the bound %v + slack %v", r.RecoveryMax.Round(time.Millisecond), r.RecoveryBound, r.RecoverySlack))
		}
		if r.RecoveryMissing > 0 {
			out = append(out, fmt.Sprintf("%d holder deaths were not followed by a grant before the run ended", r.RecoveryMissing))
		}
	}
	if r.Injections == 0 && r.Fault != "none" && r.Fault != "" {
		out = append(out, "the fault was never injected")
	}
	if r.Grants == 0 {
		out = append(out, "no grant at all")
	}
	return out
}
