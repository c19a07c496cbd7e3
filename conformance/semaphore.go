package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/childproc"
)

// semaphoreCases are the rules of counting semaphores. They run on every
// backend whose Capabilities.MaxPermits is above zero. Each is short (a
// few permits, waits of a few round trips): together they cost about the
// suite's TTL twice, plus the start of the child processes.
var semaphoreCases = []testCase{
	{"SemaphoreLimit",
		"At most N clients hold permits of a semaphore of N at once: N clients each get one with TryAcquire and the next is refused with ErrNotAcquired; 4 lockers × 3 goroutines acquiring and releasing permits of one name never see more than N holders, and their history (grants, fenced writes, releases) is explained by the fenced-semaphore model; across processes, of N child processes and the parent asking for N permits, N hold and the last is granted only when the parent releases.",
		[]need{needSemaphores}, caseSemaphoreLimit},
	{"SemaphoreFencing",
		"Fencing tokens strictly increase across all the permits granted for a name: across lockers, across TryAcquire and Acquire, while other permits are held, and under concurrent acquisitions (no token is ever given twice).",
		[]need{needSemaphores, needFencing}, caseSemaphoreFencing},
	{"SemaphoreCrashFreesPermit",
		"A dead holder's permit comes back within the backend's bound: on a TTL-bound backend a permit that is never refreshed nor released is granted to another client no earlier than its lease deadline and within its TTL plus the waiter's notice bound, with a higher token; a holder process killed with SIGKILL frees its permit within Capabilities.ReleaseOnCrash plus the notice bound.",
		[]need{needSemaphores}, caseSemaphoreCrash},
	{"SemaphoreCancelLeavesNothing",
		"A cancelled semaphore Acquire leaves nothing behind: while all N permits are held it returns the context's error promptly (deadline or cancel), a permit freed afterwards goes to a waiter that came later, and once the holders release another client takes all N permits at once.",
		[]need{needSemaphores}, caseSemaphoreCancel},
	{"SemaphoreWakes",
		"A waiter blocked on a semaphore whose permits are all held is granted one within a bound after a holder releases: at once for a queue or a notification (Capabilities.SemaphoreWait), within the portable layer's 100ms backoff cap for polling.",
		[]need{needSemaphores}, caseSemaphoreWakes},
	{"SemaphoreMismatchedPermits",
		"Two clients that disagree on N get an error, not two limits: while permits of a semaphore of N are held, an attempt naming another number fails with ErrInvalidOption (Acquire too, without waiting) and changes nothing (the holders keep their permits, exactly the free ones can be taken); once every permit is free, the new number applies.",
		[]need{needSemaphores}, caseSemaphoreMismatch},
	{"SemaphoreOnePermit",
		"A semaphore of one permit behaves as a lock: one holder at a time, another client's TryAcquire is refused and its Acquire waits for the release, and the next grant has a higher token.",
		[]need{needSemaphores}, caseSemaphoreOnePermit},
	{"SemaphoreBadInput",
		"Locker.Semaphore refuses a number of permits below 1 or above Capabilities.MaxPermits with ErrInvalidOption and a bad name with ErrInvalidName; a permit asked for with an Owner or a bad TTL is refused with ErrInvalidOption before any server call (even with a context already cancelled); nothing is left held.",
		[]need{needSemaphores}, caseSemaphoreBadInput},
	{"SemaphoreLockIndependent",
		"A semaphore and a lock of the same name are independent: holding the lock takes no permit, holding every permit does not hold the lock.",
		[]need{needSemaphores}, caseSemaphoreLockIndependent},
}

func needSemaphores(c *caseT) string {
	if c.caps.MaxPermits <= 0 {
		return "the backend has no semaphores (Capabilities.MaxPermits is 0)"
	}
	return ""
}

// semN is the number of permits of most semaphore cases: small, so that
// they are fast.
const semN = 3

// permits returns n, or the backend's maximum when it is lower.
func (c *caseT) permits(n int) int { return min(n, c.caps.MaxPermits) }

// sem returns the semaphore name of n permits on l, or ends the case.
func (c *caseT) sem(l *dlock.Locker, name string, n int) *dlock.Semaphore {
	s, err := l.Semaphore(name, n)
	if err != nil {
		c.Fatalf("Semaphore(%q, %d): %v", name, n, err)
	}
	return s
}

// mustTryPermit takes a permit that is free or ends the case.
func (c *caseT) mustTryPermit(s *dlock.Semaphore, opts *dlock.AcquireOptions, why string) *dlock.Lease {
	ctx, cancel := c.withTimeout(c.fast() + 5*time.Second)
	defer cancel()
	ls, err := s.TryAcquire(ctx, opts)
	if err != nil {
		c.Fatalf("%s: TryAcquire of a permit of %q (%d permits): %v", why, s.Name(), s.Permits(), err)
	}
	return ls
}

// expectNoPermit checks that s has no free permit now.
func (c *caseT) expectNoPermit(s *dlock.Semaphore, why string) bool {
	ctx, cancel := c.withTimeout(c.fast() + time.Second)
	defer cancel()
	ls, err := s.TryAcquire(ctx, c.opts())
	if err == nil {
		c.Errorf("%s: TryAcquire of a permit of %q (%d permits) succeeded (token %d), want ErrNotAcquired", why, s.Name(), s.Permits(), ls.Token())
		_ = ls.Release(ctx)
		return false
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		c.Errorf("%s: TryAcquire of a permit of %q returned %v, want ErrNotAcquired", why, s.Name(), err)
		return false
	}
	return true
}

// releaseAll releases every lease of lss.
func (c *caseT) releaseAll(lss []*dlock.Lease, what string) {
	for _, ls := range lss {
		c.release(ls, what)
	}
}

// acquirePermitAsync runs s.Acquire in the background.
func (c *caseT) acquirePermitAsync(ctx context.Context, s *dlock.Semaphore, opts *dlock.AcquireOptions) <-chan acq {
	ch := make(chan acq, 1)
	go func() {
		ls, err := s.Acquire(ctx, opts)
		ch <- acq{ls, err, time.Now()}
	}()
	return ch
}

// semWake is the bound from a permit's release to a waiter's grant.
func (c *caseT) semWake() time.Duration { return c.wakeBound(c.caps.SemaphoreWait) }

// semNotice is how long a semaphore's waiter may take, beyond the
// server's expiry of a permit, to find it free (as expiryNotice for locks).
func (c *caseT) semNotice() time.Duration { return c.noticeBound(c.caps.SemaphoreWait) }

func caseSemaphoreLimit(c *caseT) {
	n := c.permits(semN)
	lockers := []*dlock.Locker{c.Locker(), c.Locker(), c.Locker(), c.Locker()}
	name := c.Name("limit")
	var held []*dlock.Lease
	for i := range n {
		held = append(held, c.mustTryPermit(c.sem(lockers[i%3], name, n), c.holdOpts(), fmt.Sprintf("permit %d of %d", i+1, n)))
	}
	c.expectNoPermit(c.sem(lockers[3], name, n), fmt.Sprintf("while %d of %d permits are held", n, n))
	c.releaseAll(held, "holder")

	// Contention: the counter of holders is raised after a grant and
	// lowered before the release, so it never counts more than really
	// hold; above N is a real violation.
	const goroutines = 3
	rounds := max(c.cfg.rounds, 3)
	var inside, most, over atomic.Int32
	reg := NewSemRegister(n)
	sems := make([]*dlock.Semaphore, len(lockers))
	for li, l := range lockers {
		sems[li] = c.sem(l, name, n)
	}
	hist := c.contend(contention{
		lockers: len(lockers), goroutines: goroutines, rounds: rounds, what: " of a permit",
		acquire: func(li int) (*dlock.Lease, error) { return sems[li].Acquire(c.ctx, c.holdOpts()) },
		enter: func() {
			k := inside.Add(1)
			if k > int32(n) {
				over.Add(1)
			}
			for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
			}
		},
		// The register may refuse a live holder that N newer permits
		// outran (it cannot tell holders from tokens); the model says
		// whether the refusal is explained.
		write: func(_ int, tok uint64) error { return reg.Write(tok) },
		leave: func(error) {
			time.Sleep(time.Millisecond)
			inside.Add(-1)
		},
		fail: c.failUpTo(5),
	})
	if o := over.Load(); o > 0 {
		c.Errorf("more than %d holders of a semaphore of %d permits at once, %d times (at most %d at once)", n, n, o, most.Load())
	}
	if n <= MaxModelPermits {
		if err := CheckFencedSemaphore(hist.Ops(), n, FencedOptions{Fencing: c.caps.Fencing, Dir: c.reportDir(), Name: c.caseName}); err != nil {
			c.Errorf("%v", err)
		}
	}
	c.Notef("%d lockers × %d goroutines × %d rounds: at most %d of %d permits held at once", len(lockers), goroutines, rounds, most.Load(), n)

	if reason := needCrossProcess(c); reason != "" {
		c.Notef("part skipped (processes): %s", reason)
		return
	}
	semaphoreProcesses(c, lockers[0], lockers[3], n)
}

// semaphoreProcesses: the parent holds one permit and n child processes
// ask for one each: n-1 of them hold, the last waits for the parent's.
func semaphoreProcesses(c *caseT, p, q *dlock.Locker, n int) {
	name := c.Name("procs")
	mine := c.mustTryPermit(c.sem(p, name, n), c.holdOpts(), "the parent's permit")
	type said struct {
		i   int
		tok uint64
		err error
	}
	got := make(chan said, n)
	children := make([]*childproc.Child, n)
	for i := range children {
		children[i] = c.spawnPermit(name, n)
	}
	for i, ch := range children {
		go func() {
			rest, err := ch.Expect("acquired", childStart)
			var tok uint64
			if err == nil {
				tok, err = strconv.ParseUint(rest, 10, 64)
			}
			got <- said{i, tok, err}
		}()
	}
	holding := map[int]uint64{}
	for range n - 1 {
		r := <-got
		if r.err != nil {
			c.Fatalf("child %d: %v", r.i, r.err)
		}
		holding[r.i] = r.tok
	}
	c.expectNoPermit(c.sem(q, name, n), fmt.Sprintf("while the parent and %d child processes hold permits", n-1))
	select {
	case r := <-got:
		if r.err == nil {
			c.Fatalf("%d processes hold a permit of a semaphore of %d: the parent and children with tokens %v and %d", n+1, n, holding, r.tok)
		}
		c.Fatalf("child %d: %v", r.i, r.err)
	case <-time.After(5*c.rtt + 100*time.Millisecond):
	}
	c.release(mine, "the parent's permit")
	select {
	case r := <-got:
		if r.err != nil {
			c.Fatalf("the waiting child process did not get the parent's freed permit: %v", r.err)
		}
	case <-time.After(c.semWake() + 10*time.Second):
		c.Fatalf("the waiting child process did not get the parent's freed permit within %v", c.semWake()+10*time.Second)
	}
	for _, ch := range children {
		c.tell(ch, "exit")
	}
	for _, ch := range children {
		if err := ch.Wait(10 * time.Second); err != nil {
			c.Errorf("a child process did not exit: %v", err)
		}
	}
	// The children released their permits as they closed their Lockers.
	s := c.sem(q, name, n)
	var all []*dlock.Lease
	for i := range n {
		ctx, cancel := c.withTimeout(c.fast() + 5*time.Second)
		ls, err := s.Acquire(ctx, c.opts())
		cancel()
		if err != nil {
			c.Errorf("permit %d of %d after the child processes exited: %v", i+1, n, err)
			break
		}
		all = append(all, ls)
	}
	c.releaseAll(all, "after the children")
}

func caseSemaphoreFencing(c *caseT) {
	a, b, d := c.Locker(), c.Locker(), c.Locker()
	name := c.Name("fence")
	n := c.permits(semN)
	var last uint64
	seen := map[uint64]bool{}
	next := func(ls *dlock.Lease, how string) *dlock.Lease {
		tok := ls.Token()
		switch {
		case seen[tok]:
			c.Errorf("%s: token %d was given before to another permit of %q", how, tok, name)
		case tok <= last:
			c.Errorf("%s: token %d is not above the previous grant's %d", how, tok, last)
		}
		seen[tok] = true
		last = max(last, tok)
		return ls
	}
	acquire := func(l *dlock.Locker, how string) *dlock.Lease {
		ctx, cancel := c.withTimeout(c.semWake() + 5*time.Second)
		defer cancel()
		ls, err := c.sem(l, name, n).Acquire(ctx, c.holdOpts())
		if err != nil {
			c.Fatalf("%s: Acquire of a free permit: %v", how, err)
		}
		return next(ls, how)
	}
	p1 := next(c.mustTryPermit(c.sem(a, name, n), c.holdOpts(), "first"), "first permit (TryAcquire, locker A)")
	p2 := next(c.mustTryPermit(c.sem(b, name, n), c.holdOpts(), "second"), "second permit (TryAcquire, locker B, A holding)")
	p3 := acquire(d, "third permit (Acquire, locker C, A and B holding)")
	c.release(p1, "first permit")
	p4 := acquire(a, "a permit freed by A, taken again by A (Acquire)")
	c.release(p2, "second permit")
	c.release(p3, "third permit")
	p5 := next(c.mustTryPermit(c.sem(b, name, n), c.holdOpts(), "fifth"), "a permit taken by B after B and C released (TryAcquire)")
	c.release(p4, "fourth permit")
	c.release(p5, "fifth permit")

	// Concurrent grants: every token new, and above all the earlier ones.
	floor := last
	var mu sync.Mutex
	var toks []uint64
	var wg sync.WaitGroup
	for _, l := range []*dlock.Locker{a, b, d} {
		s := c.sem(l, name, n)
		for range 2 {
			wg.Go(func() {
				var mine uint64
				for range 4 {
					ls, err := s.Acquire(c.ctx, c.holdOpts())
					if err != nil {
						c.Errorf("Acquire of a permit: %v", err)
						return
					}
					tok := ls.Token()
					if tok <= mine {
						c.Errorf("a goroutine's permits got tokens %d then %d: not increasing", mine, tok)
					}
					mine = tok
					mu.Lock()
					toks = append(toks, tok)
					mu.Unlock()
					_ = ls.Release(c.ctx)
				}
			})
		}
	}
	wg.Wait()
	slices.Sort(toks)
	for i, t := range toks {
		if t <= floor {
			c.Errorf("a concurrent grant got token %d, not above %d given before", t, floor)
			break
		}
		if i > 0 && toks[i-1] == t {
			c.Errorf("token %d was given to two permits of %q granted concurrently", t, name)
			break
		}
	}
	c.Notef("%d concurrent grants, tokens %d..%d", len(toks), toks[0], toks[len(toks)-1])
}

func caseSemaphoreCrash(c *caseT) {
	a, b := c.Locker(), c.Locker()
	parts := 0
	if !c.caps.SessionBound {
		parts++
		// A holder that dies without a word stops refreshing: its permit
		// must expire on the server.
		name := c.Name("abandoned")
		lo := max(c.caps.MinTTL, dlock.MinTTL)
		ttl := max(lo, min(c.ttl(), 500*time.Millisecond))
		keep := c.mustTryPermit(c.sem(a, name, 2), c.holdOpts(), "the live holder")
		start := time.Now()
		gone := c.mustTryPermit(c.sem(a, name, 2), &dlock.AcquireOptions{TTL: ttl, NoKeepAlive: true}, "the abandoned permit")
		dl, _ := gone.Deadline()
		c.expectNoPermit(c.sem(b, name, 2), "while both permits are held")
		bound := ttl + c.semNotice()
		ctx, cancel := c.withTimeout(bound + 5*time.Second)
		r := <-c.acquirePermitAsync(ctx, c.sem(b, name, 2), c.opts())
		cancel()
		if r.err != nil {
			c.Errorf("the permit of a holder that never refreshed nor released it (TTL %v) was not granted to another client within %v: %v", ttl, bound+5*time.Second, r.err)
		} else {
			if r.at.Before(dl) {
				c.Errorf("another client was granted the abandoned permit %v before its lease deadline: the server expired it earlier than the TTL promised to the holder", dl.Sub(r.at))
			}
			if el := r.at.Sub(start); el > bound {
				c.Errorf("the abandoned permit (TTL %v) was granted again %v after its grant, bound %v (TTL + notice)", ttl, el, bound)
			}
			if c.caps.Fencing && r.ls.Token() <= max(gone.Token(), keep.Token()) {
				c.Errorf("the token after the expiry (%d) is not above the earlier permits' (%d, %d)", r.ls.Token(), keep.Token(), gone.Token())
			}
			c.Notef("abandoned permit (TTL %v) granted again after %v", ttl, r.at.Sub(start))
			c.release(r.ls, "new holder")
		}
		c.release(keep, "live holder")
	}
	if reason := needCrossProcess(c); reason != "" {
		c.Notef("part skipped (killed process): %s", reason)
	} else {
		parts++
		name := c.Name("crash")
		keep := c.mustTryPermit(c.sem(a, name, 2), c.holdOpts(), "the parent's permit")
		ch := c.spawnPermit(name, 2)
		tok := c.token(c.expect(ch, "acquired", childStart))
		c.expectNoPermit(c.sem(b, name, 2), "while the parent and a child process hold both permits")
		bound := c.crashBound() + c.semNotice()
		killed := time.Now()
		if err := ch.Kill(); err != nil {
			c.Fatalf("SIGKILL of the child: %v", err)
		}
		<-ch.Exited()
		ctx, cancel := c.withTimeout(bound + 5*time.Second)
		ls, err := c.sem(b, name, 2).Acquire(ctx, c.opts())
		cancel()
		el := time.Since(killed)
		if err != nil {
			c.Fatalf("the permit of a killed holder was not freed within %v: %v", bound+5*time.Second, err)
		}
		if el > bound {
			c.Errorf("the permit of a killed holder was free %v after SIGKILL, bound %v (ReleaseOnCrash %v + notice %v)", el, bound, c.caps.ReleaseOnCrash, c.semNotice())
		}
		if c.caps.Fencing && ls.Token() <= tok {
			c.Errorf("the token after the crash (%d) is not above the dead holder's (%d)", ls.Token(), tok)
		}
		c.Notef("killed holder's permit taken over after %v (bound %v)", el, bound)
		c.release(ls, "new holder")
		c.release(keep, "the parent's permit")
	}
	if parts == 0 {
		c.Skipf("session-bound backend and no child processes: no holder can die here")
	}
}

func caseSemaphoreCancel(c *caseT) {
	n := c.permits(2)
	a, w, nx, o := c.Locker(), c.Locker(), c.Locker(), c.Locker()
	name := c.Name("cancel")
	var held []*dlock.Lease
	for i := range n {
		held = append(held, c.mustTryPermit(c.sem(a, name, n), c.holdOpts(), fmt.Sprintf("holder %d", i+1)))
	}
	patience := max(100*time.Millisecond, 5*c.rtt)
	// A cancelled waiter asks for a long lease: granted behind the
	// caller's back, it would keep its permit through the case.
	ghostTTL := 20 * c.ttl()
	for _, mode := range []string{"deadline", "cancel"} {
		ctx, cancel, want := c.endingContext(mode, patience)
		ctxEnd := time.Now().Add(patience)
		ch := c.acquirePermitAsync(ctx, c.sem(w, name, n), &dlock.AcquireOptions{TTL: ghostTTL})
		var r acq
		select {
		case r = <-ch:
		case <-time.After(patience + c.fast()):
			cancel()
			c.Fatalf("semaphore Acquire (%s) did not return within %v after its context ended", mode, c.fast())
		}
		cancel()
		if r.err == nil {
			c.release(r.ls, "waiter")
			c.Fatalf("semaphore Acquire (%s) was granted a permit while all %d were held", mode, n)
		}
		c.checkEnded("semaphore Acquire", mode, r, want, ctxEnd)
	}
	// A waiter that comes later gets the next freed permit: nothing of
	// the cancelled ones takes it (a ghost would hold it for 20 TTLs).
	bound := c.semWake() + 2*time.Second
	ctx, cancel := c.withTimeout(bound)
	defer cancel()
	ch := c.acquirePermitAsync(ctx, c.sem(nx, name, n), c.opts())
	c.sleep(5*c.rtt + 50*time.Millisecond)
	c.release(held[0], "holder")
	r := <-ch
	if r.err != nil {
		c.Errorf("a waiter that came after the cancelled ones did not get the freed permit within %v (%v): a cancelled waiter took it or blocks the queue", bound, r.err)
	} else {
		c.release(r.ls, "later waiter")
	}
	c.releaseAll(held[1:], "holder")
	// Every permit is free now: another client takes all of them at once.
	s := c.sem(o, name, n)
	var all []*dlock.Lease
	for i := range n {
		var ls *dlock.Lease
		var err error
		for deadline := time.Now().Add(c.fast()); ; {
			ctx, cancel := c.quick()
			ls, err = s.TryAcquire(ctx, c.opts())
			cancel()
			if err == nil || !errors.Is(err, dlock.ErrNotAcquired) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			c.Errorf("permit %d of %d after every holder released and the waiters were cancelled: %v: a cancelled waiter holds it", i+1, n, err)
			break
		}
		all = append(all, ls)
	}
	c.releaseAll(all, "after the cancelled waiters")
}

func caseSemaphoreWakes(c *caseT) {
	n := c.permits(2)
	a, b := c.Locker(), c.Locker()
	name := c.Name("wake")
	var ds []time.Duration
	for range 3 {
		var held []*dlock.Lease
		for i := range n {
			held = append(held, c.mustTryPermit(c.sem(a, name, n), c.holdOpts(), fmt.Sprintf("holder %d", i+1)))
		}
		ctx, cancel := c.withTimeout(c.semWake() + 10*time.Second)
		ch := c.acquirePermitAsync(ctx, c.sem(b, name, n), c.opts())
		waiter, d := c.releaseToWaiter(ch, cancel, held[0], "semaphore Acquire", fmt.Sprintf("all %d permits were held", n))
		ds = append(ds, d)
		c.release(waiter, "waiter")
		c.releaseAll(held[1:], "holder")
	}
	if m := median(ds); m > c.semWake() {
		c.Errorf("a waiter was granted a permit %v after a release (median of %v), bound %v for SemaphoreWait %q: it polls with long sleeps",
			m, ds, c.semWake(), c.caps.SemaphoreWait)
	}
	c.Notef("release → waiter's grant: %v", ds)
}

func caseSemaphoreMismatch(c *caseT) {
	n := c.permits(semN)
	if n < 2 {
		c.Skipf("the backend's semaphores have at most %d permit: no other number to disagree on", n)
	}
	a, b, d := c.Locker(), c.Locker(), c.Locker()
	name := c.Name("mismatch")
	var held []*dlock.Lease
	for i := range n - 1 {
		held = append(held, c.mustTryPermit(c.sem(a, name, n), c.holdOpts(), fmt.Sprintf("holder %d", i+1)))
	}
	others := []int{n - 1}
	if n+1 <= c.caps.MaxPermits {
		others = append(others, n+1)
	}
	for _, m := range others {
		s := c.sem(b, name, m)
		ls, err := s.TryAcquire(c.ctx, c.opts())
		c.expectRefused(ls, err, dlock.ErrInvalidOption, "ErrInvalidOption",
			"mismatched N", fmt.Sprintf("TryAcquire naming %d permits while %d of %d are held", m, n-1, n))
		ctx, cancel := c.withTimeout(c.fast() + time.Second)
		ls, err = s.Acquire(ctx, c.opts())
		cancel()
		c.expectRefused(ls, err, dlock.ErrInvalidOption, "ErrInvalidOption (at once, not a wait)",
			"mismatched N", fmt.Sprintf("Acquire naming %d permits while %d of %d are held", m, n-1, n))
	}
	for i, ls := range held {
		if err := ls.Err(); err != nil {
			c.Errorf("permit %d of the first client ended (%v) after attempts with another number of permits", i+1, err)
		}
	}
	// Nothing changed: exactly one permit is free.
	last := c.mustTryPermit(c.sem(d, name, n), c.opts(), fmt.Sprintf("the last free permit of %d after the refused attempts", n))
	c.expectNoPermit(c.sem(d, name, n), fmt.Sprintf("after the refused attempts and %d grants", n))
	c.releaseAll(append(held, last), "holder")

	// Every permit free: the next number applies.
	m := n - 1
	s := c.sem(b, name, m)
	var now []*dlock.Lease
	for i := range m {
		now = append(now, c.mustTryPermit(s, c.opts(), fmt.Sprintf("permit %d of the new number %d, once the old %d were free", i+1, m, n)))
	}
	c.expectNoPermit(c.sem(d, name, m), fmt.Sprintf("with the new number %d, all held", m))
	ls, err := c.sem(a, name, n).TryAcquire(c.ctx, c.opts())
	c.expectRefused(ls, err, dlock.ErrInvalidOption, "ErrInvalidOption", "old N",
		fmt.Sprintf("TryAcquire naming the old number %d while permits of the new %d are held", n, m))
	c.releaseAll(now, "holder")
}

func caseSemaphoreOnePermit(c *caseT) {
	a, b := c.Locker(), c.Locker()
	name := c.Name("one")
	h := c.mustTryPermit(c.sem(a, name, 1), c.holdOpts(), "the only permit")
	c.expectNoPermit(c.sem(b, name, 1), "another client while the only permit is held")
	c.expectNoPermit(c.sem(a, name, 1), "the holder's own Locker while the only permit is held")
	ctx, cancel := c.withTimeout(c.semWake() + 10*time.Second)
	defer cancel()
	ch := c.acquirePermitAsync(ctx, c.sem(b, name, 1), c.opts())
	select {
	case r := <-ch:
		if r.err == nil {
			c.release(r.ls, "second holder")
		}
		c.Fatalf("Acquire of a held one-permit semaphore returned (err %v) before the holder released", r.err)
	case <-time.After(5*c.rtt + 50*time.Millisecond):
	}
	c.release(h, "holder")
	r := <-ch
	if r.err != nil {
		c.Fatalf("Acquire after the holder of the only permit released: %v", r.err)
	}
	if c.caps.Fencing && r.ls.Token() <= h.Token() {
		c.Errorf("the next holder's token %d is not above the previous one's %d", r.ls.Token(), h.Token())
	}
	c.expectNoPermit(c.sem(a, name, 1), "while the waiter holds the only permit")
	c.release(r.ls, "waiter")
}

func caseSemaphoreBadInput(c *caseT) {
	a, b := c.Locker(), c.Locker()
	name := c.Name("bad")
	top := c.caps.MaxPermits
	bad := []int{0, -1, math.MinInt}
	if top < math.MaxInt {
		bad = append(bad, top+1, math.MaxInt)
	}
	for _, p := range bad {
		if _, err := a.Semaphore(name, p); !errors.Is(err, dlock.ErrInvalidOption) {
			c.Errorf("Semaphore(%q, %d) returned %v, want ErrInvalidOption (the backend's maximum is %d)", name, p, err, top)
		}
	}
	if _, err := a.Semaphore(name, top); err != nil {
		c.Errorf("Semaphore(%q, %d), the declared maximum, returned %v", name, top, err)
	}
	for _, bn := range []string{"", c.Name("\xff\xfe")} {
		if _, err := a.Semaphore(bn, 2); !errors.Is(err, dlock.ErrInvalidName) {
			c.Errorf("Semaphore(%q, 2) returned %v, want ErrInvalidName", bn, err)
		}
	}
	// A cancelled context: an error other than ErrInvalidOption would
	// mean the call went past the argument checks.
	cctx, cancel := context.WithCancel(c.ctx)
	cancel()
	s := c.sem(a, name, 2)
	for _, o := range []struct {
		opts *dlock.AcquireOptions
		why  string
	}{
		{&dlock.AcquireOptions{TTL: c.ttl(), Owner: "owner-1"}, "with an Owner"},
		{&dlock.AcquireOptions{TTL: -time.Second}, "with a negative TTL"},
	} {
		ls, err := s.TryAcquire(cctx, o.opts)
		c.expectRefused(ls, err, dlock.ErrInvalidOption, "ErrInvalidOption", "bad permit", "TryAcquire of a permit "+o.why)
		ls, err = s.Acquire(cctx, o.opts)
		c.expectRefused(ls, err, dlock.ErrInvalidOption, "ErrInvalidOption", "bad permit", "Acquire of a permit "+o.why)
		ls, err = s.TryAcquire(c.ctx, o.opts)
		c.expectRefused(ls, err, dlock.ErrInvalidOption, "ErrInvalidOption", "bad permit", "TryAcquire (live context) of a permit "+o.why)
	}
	// Nothing is held: both permits are free.
	sb := c.sem(b, name, 2)
	p1 := c.mustTryPermit(sb, c.opts(), "after the refused calls")
	p2 := c.mustTryPermit(sb, c.opts(), "after the refused calls")
	c.release(p1, "permit")
	c.release(p2, "permit")
}

func caseSemaphoreLockIndependent(c *caseT) {
	a, b := c.Locker(), c.Locker()
	name := c.Name("both")
	lock := c.mustTry(a, name, c.holdOpts())
	permit := c.mustTryPermit(c.sem(b, name, 1), c.holdOpts(), "the only permit of a semaphore named as a held lock")
	c.expectHeld(b, name, "the lock, while a semaphore of the same name is held")
	c.expectNoPermit(c.sem(a, name, 1), "the only permit, while it and a lock of the same name are held")
	c.release(lock, "lock")
	c.expectFree(a, name, "the lock, while the only permit of a semaphore of the same name is held")
	c.expectNoPermit(c.sem(a, name, 1), "the only permit, after the lock of the same name was released")
	c.release(permit, "permit")
	p := c.mustTryPermit(c.sem(a, name, 1), c.opts(), "the only permit, after its release")
	c.release(p, "permit")
}
