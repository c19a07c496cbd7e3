package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
)

// testCase is one rule of the suite.
type testCase struct {
	name  string
	rule  string
	needs []need
	f     func(c *caseT)
}

// need returns why a case cannot run on this backend ("" when it can).
type need func(c *caseT) string

func needFencing(c *caseT) string {
	if !c.caps.Fencing {
		return fmt.Sprintf("the backend does not promise fencing tokens (%s)", c.caps.FencingNote)
	}
	return ""
}

func needTTLExpiry(c *caseT) string {
	if c.caps.SessionBound {
		return "session-bound backend: a lease lives as long as its session, not a server-side TTL"
	}
	return ""
}

func needFair(c *caseT) string {
	if !c.caps.Fair {
		return "the backend does not promise fairness (Capabilities.Fair is false)"
	}
	return ""
}

// cases is the suite: the lock cases, then the semaphore cases
// (semaphore.go). The package documentation lists the same names and
// rules (a test keeps them in step).
var cases = slices.Concat(lockCases, semaphoreCases)

// lockCases are the rules of locks.
var lockCases = []testCase{
	{"TryAcquireHeld",
		"TryAcquire on a free name succeeds; on a held name it returns an error wrapping ErrNotAcquired at once (within a small multiple of one round trip), without waiting for the holder.",
		nil, caseTryAcquireHeld},
	{"AcquireWakesAfterRelease",
		"Acquire blocks while the lock is held and returns within a bound after the holder releases: at once for a queue or a notification, within the portable layer's 100ms backoff cap for polling.",
		nil, caseAcquireWakes},
	{"AcquireHonoursContext",
		"Acquire returns the context's error promptly when its deadline passes or it is cancelled, and leaves nothing behind: the next acquirer gets the lock as soon as the holder releases it, and no server-side object of the cancelled waiter remains.",
		nil, caseAcquireHonoursContext},
	{"MutualExclusion",
		"At most one client holds a name at a time: 8 lockers × 8 goroutines acquiring one name see no overlap, lose no update of an unsynchronised counter, and their history (grants, fenced writes, releases) is explained by the fenced-mutex model.",
		nil, caseMutualExclusion},
	{"ConcurrentTryAcquireOneWinner",
		"Of 100 concurrent TryAcquire calls on a free name, exactly one succeeds and every other returns ErrNotAcquired.",
		nil, caseOneWinner},
	{"SameLockerContention",
		"Goroutines of one Locker never compete with each other on the server: of 10 concurrent TryAcquire calls of one Locker on a free name exactly one succeeds; 16 goroutines of one Locker acquiring and releasing one name see at most one holder at a time and are all granted; waiters of that Locker cancelled while a sibling holds the name leave nothing behind, and the name is free for another client at once afterwards.",
		nil, caseSameLockerContention},
	{"IndependentNames",
		"Distinct names are distinct locks: holding one (even a prefix, a case variant or an extension of another) never blocks another.",
		nil, caseIndependentNames},
	{"ReleaseSemantics",
		"Release by the holder frees the lock and ends the lease with ErrReleased; a second Release returns ErrNotHeld; the Release of a lease that expired or was revoked returns ErrNotHeld and does not free the lock that a new holder took since.",
		nil, caseReleaseSemantics},
	{"RefreshSemantics",
		"Refresh keeps the lock past its original TTL; Refresh of a lease that expired or was revoked returns ErrNotHeld and does not resurrect the lock.",
		nil, caseRefreshSemantics},
	{"KeepAlive",
		"With keep-alive a lease stays held for 5 × TTL without an explicit refresh; with NoKeepAlive it expires on the server after its TTL and another client gets it within the TTL plus the waiter's notice bound.",
		nil, caseKeepAlive},
	{"ExpiryHandOver",
		"When an unrefreshed lease expires, exactly one other client gets the lock: a client polling with TryAcquire around the expiry is granted it no earlier than the holder's lease deadline and within the TTL plus slack, and a third client is then excluded.",
		[]need{needTTLExpiry}, caseExpiryHandOver},
	{"FencingMonotonic",
		"Fencing tokens strictly increase across successive holders of a name: across lockers, across Acquire and TryAcquire, across expiry or revocation, and across a server restart where the backend keeps them.",
		[]need{needFencing}, caseFencing},
	{"LossSignalled",
		"When the server drops a lease, Done closes and Err wraps ErrLockLost within the keep-alive interval (TTL/3) plus slack; a lease that expires unrefreshed ends (its deadline passes) no later than the server grants the lock to another client; a holder cut off from the server is told before another client is granted the lock.",
		nil, caseLossSignalled},
	{"Reentrancy",
		"With an Owner, a second Acquire by the same Owner on the same Locker returns at once and must be released twice; other owners, and the same Owner on another Locker (another client), are excluded until the last release.",
		nil, caseReentrancy},
	{"Fairness",
		"On a fair backend waiters are granted the lock in the order they started waiting.",
		[]need{needFair}, caseFairness},
	{"CrossProcessCrash",
		"A holder process killed with SIGKILL frees the lock within the backend's stated bound (Capabilities.ReleaseOnCrash: at once, the TTL, or the session timeout) plus the waiter's notice bound.",
		[]need{needCrossProcess}, caseCrossProcessCrash},
	{"PausedHolderFenced",
		"A holder process stopped (SIGSTOP) until another client took the lock, then resumed, has its write with its old token rejected by the fenced resource, and its lease reported lost (ErrLockLost); on a TTL-bound backend, Err, Done and the lease's Context already say so in the first instant after it resumes, before any of its timers has run.",
		[]need{needFencing, needCrossProcess}, casePausedHolderFenced},
	{"BadInput",
		"Empty, over-long and invalid-UTF-8 names, and names the backend cannot store, are rejected with ErrInvalidName; a negative TTL or one below the portable minimum with ErrInvalidOption (zero means the default); nothing is left on the server; every name that is accepted is stored exactly (distinct names never collide).",
		nil, caseBadInput},
	{"TTLRange",
		"The backend declares the TTL range it honours (Capabilities.MinTTL and MaxTTL): a TTL just outside it, or the largest duration, is refused with ErrInvalidOption and leaves nothing on the server; a lease with the longest TTL and no keep-alive stays exclusive (no overflow, rounding or truncation on the way to the server frees it early); on a TTL-bound backend a lease with the shortest TTL and no keep-alive holds until its Done closes, and the server frees it within the waiter's notice bound after that.",
		nil, caseTTLRange},
	{"Close",
		"After Close, calls return ErrClosed, acquisitions in flight end with ErrClosed, leases end with ErrClosed and are released on the server (they stop renewing), a second Close is harmless, and nothing panics.",
		nil, caseClose},
}

func caseTryAcquireHeld(c *caseT) {
	a, b := c.Locker(), c.Locker()
	name := c.Name("held")
	ls := c.mustTry(a, name, c.holdOpts())
	var ds []time.Duration
	for range 5 {
		ctx, cancel := c.withTimeout(c.fast() + 2*time.Second)
		start := time.Now()
		l2, err := b.TryAcquire(ctx, name, c.opts())
		d := time.Since(start)
		cancel()
		if err == nil {
			c.release(l2, "second holder")
			c.Fatalf("TryAcquire of a name held by another client succeeded (token %d, holder's token %d)", l2.Token(), ls.Token())
		}
		if !errors.Is(err, dlock.ErrNotAcquired) {
			c.Fatalf("TryAcquire of a held name returned %v after %v, want ErrNotAcquired at once (it waited for the holder?)", err, d)
		}
		ds = append(ds, d)
	}
	if m := median(ds); m > c.fast() {
		c.Errorf("TryAcquire of a held name took %v (median of 5), bound %v (10 round trips of %v + slack): it waits", m, c.fast(), c.rtt)
	}
	c.Notef("TryAcquire of a held name: median %v", median(ds))
	qctx, qcancel := c.quick()
	defer qcancel()
	if l3, err := a.TryAcquire(qctx, name, c.opts()); err == nil {
		c.release(l3, "second grant")
		c.Errorf("the holder's own Locker got a second grant of %q without an Owner", name)
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		c.Errorf("the holder's own Locker's TryAcquire returned %v, want ErrNotAcquired", err)
	}
	c.release(ls, "holder")
	c.expectFree(b, name, "after the holder released")
}

func caseAcquireWakes(c *caseT) {
	a, b := c.Locker(), c.Locker()
	name := c.Name("wake")
	var ds []time.Duration
	for range 3 {
		ls := c.mustTry(a, name, c.holdOpts())
		ctx, cancel := c.withTimeout(c.wake() + 10*time.Second)
		ch := c.acquireAsync(ctx, b, name, c.opts())
		waiter, d := c.releaseToWaiter(ch, cancel, ls, "Acquire", "another client held the lock")
		ds = append(ds, d)
		c.release(waiter, "waiter")
	}
	if m := median(ds); m > c.wake() {
		c.Errorf("a waiter was granted the lock %v after the release (median of 3: %v), bound %v for wait kind %q: it polls with long sleeps",
			m, ds, c.wake(), c.caps.Wait)
	}
	c.Notef("release → waiter's grant: %v", ds)
}

// releaseToWaiter checks that the waiter ch (cancel ends its context) still
// waits, releases ls and returns the waiter's lease and how long after
// the release it was granted; what names the waiter's call and while
// what it waits for, in failures.
func (c *caseT) releaseToWaiter(ch <-chan acq, cancel context.CancelFunc, ls *dlock.Lease, what, while string) (*dlock.Lease, time.Duration) {
	select {
	case r := <-ch:
		cancel()
		c.Fatalf("%s returned (err %v) while %s", what, r.err, while)
	case <-time.After(5*c.rtt + 50*time.Millisecond):
	}
	released := time.Now()
	c.release(ls, "holder")
	r := <-ch
	cancel()
	if r.err != nil {
		c.Fatalf("%s after the holder released: %v", what, r.err)
	}
	return r.ls, r.at.Sub(released)
}

func caseAcquireHonoursContext(c *caseT) {
	a, w, n := c.Locker(), c.Locker(), c.Locker()
	name := c.Name("ctx")
	ls := c.mustTry(a, name, c.holdOpts())
	patience := max(100*time.Millisecond, 5*c.rtt)
	// A cancelled waiter asks for a long lease: if it were granted behind
	// the caller's back, it would keep the lock from the next acquirer.
	ghostTTL := 20 * c.ttl()
	for _, mode := range []string{"deadline", "cancel"} {
		ctx, cancel, want := c.endingContext(mode, patience)
		ctxEnd := time.Now().Add(patience)
		ch := c.acquireAsync(ctx, w, name, &dlock.AcquireOptions{TTL: ghostTTL})
		var r acq
		select {
		case r = <-ch:
		case <-time.After(patience + c.fast()):
			cancel()
			c.Errorf("Acquire (%s) did not return within %v after its context ended", mode, c.fast())
			c.release(ls, "holder")
			if r := <-ch; r.err == nil {
				c.release(r.ls, "late waiter")
				c.Fatalf("Acquire (%s) ignored its context: it returned only after the holder released, with a grant", mode)
			}
			c.Fatalf("Acquire (%s) ignored its context: it returned only after the holder released", mode)
		}
		cancel()
		if r.err == nil {
			c.release(r.ls, "waiter")
			if err := ls.Err(); err != nil {
				c.Fatalf("the holder's lease ended (%v) while Acquire (%s) waited, so the waiter was granted: the keep-alive failed", err, mode)
			}
			c.Fatalf("Acquire (%s) was granted while another client held the lock", mode)
		}
		c.checkEnded("Acquire", mode, r, want, ctxEnd)
	}
	if rs, ok := c.h.(Residue); ok {
		var left int
		deadline := time.Now().Add(c.fast())
		for {
			k, err := rs.Residue(c.ctx, name)
			if err != nil {
				c.Errorf("harness Residue: %v", err)
				break
			}
			left = k
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if left != 0 {
			c.Errorf("%d server-side objects of the cancelled waiters remain (Residue), want 0", left)
		}
	} else {
		c.Notef("part skipped: the harness has no Residue hook to count what a cancelled waiter left on the server")
	}
	ctx, cancel := c.withTimeout(c.wake() + 3*time.Second)
	defer cancel()
	ch := c.acquireAsync(ctx, n, name, c.opts())
	c.sleep(5*c.rtt + 50*time.Millisecond)
	released := time.Now()
	c.release(ls, "holder")
	r := <-ch
	if r.err != nil {
		c.Fatalf("the next acquirer did not get the lock after the holder released (%v): a cancelled waiter left behind holds or blocks it", r.err)
	}
	if d := r.at.Sub(released); d > c.wake() {
		c.Errorf("the next acquirer got the lock %v after the release, bound %v: it was delayed by a cancelled waiter", d, c.wake())
	}
	c.release(r.ls, "next acquirer")
}

func caseMutualExclusion(c *caseT) {
	const nLockers, nGoroutines = 8, 8
	rounds := c.cfg.rounds
	lockers := make([]*dlock.Locker, nLockers)
	for i := range lockers {
		lockers[i] = c.Locker()
	}
	name := c.Name("mutex")
	reg := &Register{}
	var inside atomic.Int32
	var overlaps, counter, grants atomic.Int64
	fail := c.failUpTo(5)
	// Critical sections take microseconds: a long TTL keeps a starved
	// keep-alive on a loaded machine from being mistaken for an overlap.
	opts := &dlock.AcquireOptions{TTL: 5 * c.ttl()}
	hist := c.contend(contention{
		lockers: nLockers, goroutines: nGoroutines, rounds: rounds,
		acquire: func(li int) (*dlock.Lease, error) { return lockers[li].Acquire(c.ctx, name, opts) },
		enter: func() {
			grants.Add(1)
			if inside.Add(1) != 1 {
				overlaps.Add(1)
			}
			v := counter.Load()
			runtime.Gosched()
			counter.Store(v + 1)
		},
		write: func(client int, tok uint64) error { return reg.Write(tok, client) },
		leave: func(werr error) {
			if werr != nil && c.caps.Fencing {
				fail("the fenced register rejected the holder's write: %v", werr)
			}
			inside.Add(-1)
		},
		fail: fail,
	})
	total := int64(nLockers * nGoroutines * rounds)
	if o := overlaps.Load(); o != 0 {
		c.Errorf("%d overlapping critical sections in %d grants, want 0", o, grants.Load())
	}
	if got := counter.Load(); got != grants.Load() {
		c.Errorf("the unsynchronised counter is %d after %d critical sections: updates were lost to overlapping holders", got, grants.Load())
	}
	if grants.Load() != total {
		c.Errorf("%d of %d acquisitions succeeded", grants.Load(), total)
	}
	err := CheckFenced(hist.Ops(), FencedOptions{Fencing: c.caps.Fencing, Dir: c.reportDir(), Name: c.caseName})
	if err != nil {
		c.Errorf("%v", err)
	}
	c.Notef("%d critical sections on %d lockers × %d goroutines", grants.Load(), nLockers, nGoroutines)
}

func caseOneWinner(c *caseT) {
	const n, nLockers = 100, 10
	lockers := make([]*dlock.Locker, nLockers)
	for i := range lockers {
		lockers[i] = c.Locker()
	}
	for round := range 3 {
		// holdOpts: a winner whose keep-alive starves while 100 calls
		// share the pool must not expire within the round.
		winners, others := c.raceTryAcquire(c.Name(fmt.Sprintf("race%d", round)), n, func(i int) *dlock.Locker { return lockers[i%nLockers] })
		if winners != 1 {
			c.Errorf("round %d: %d of %d concurrent TryAcquire calls succeeded, want exactly 1", round, winners, n)
		}
		if len(others) > 0 {
			c.Errorf("round %d: %d TryAcquire calls failed with something other than ErrNotAcquired, e.g. %v", round, len(others), others[0])
		}
	}
}

// raceTryAcquire starts n TryAcquire calls of name at once, the i-th on
// locker(i), and releases the winners once all have returned. It returns
// how many won and the errors other than ErrNotAcquired.
func (c *caseT) raceTryAcquire(name string, n int, locker func(int) *dlock.Locker) (winners int, others []error) {
	start := make(chan struct{})
	var (
		mu  sync.Mutex
		won []*dlock.Lease
	)
	ctx, cancel := c.withTimeout(c.fast() + 2*time.Second)
	var wg sync.WaitGroup
	for i := range n {
		l := locker(i)
		wg.Go(func() {
			<-start
			ls, err := l.TryAcquire(ctx, name, c.holdOpts())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, ls)
			case !errors.Is(err, dlock.ErrNotAcquired):
				others = append(others, err)
			}
		})
	}
	close(start)
	wg.Wait()
	cancel()
	for _, ls := range won {
		c.release(ls, "winner")
	}
	return len(won), others
}

func caseSameLockerContention(c *caseT) {
	l := c.Locker()
	for round := range 3 {
		winners, others := c.raceTryAcquire(c.Name(fmt.Sprintf("siblings%d", round)), 10, func(int) *dlock.Locker { return l })
		if winners != 1 {
			c.Errorf("round %d: %d of 10 concurrent TryAcquire calls of one Locker succeeded, want exactly 1", round, winners)
		}
		if len(others) > 0 {
			c.Errorf("round %d: %d TryAcquire calls failed with something other than ErrNotAcquired, e.g. %v", round, len(others), others[0])
		}
	}

	const n = 16
	name := c.Name("siblings")
	opts := &dlock.AcquireOptions{TTL: 5 * c.ttl()}
	var inside atomic.Int32
	var overlaps, grants atomic.Int64
	var failures atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for range c.cfg.rounds {
				ls, err := l.Acquire(c.ctx, name, opts)
				if err != nil {
					if failures.Add(1) <= 5 {
						c.Errorf("Acquire by one of %d goroutines of one Locker: %v", n, err)
					}
					return
				}
				grants.Add(1)
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				runtime.Gosched()
				inside.Add(-1)
				if err := ls.Release(c.ctx); err != nil && failures.Add(1) <= 5 {
					c.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if o := overlaps.Load(); o != 0 {
		c.Errorf("%d overlapping critical sections of goroutines of one Locker in %d grants, want 0", o, grants.Load())
	}
	if g, want := grants.Load(), int64(n*c.cfg.rounds); g != want {
		c.Errorf("%d of %d acquisitions by goroutines of one Locker succeeded", g, want)
	}

	// Waiters of the holder's own Locker, cancelled: nothing of them stays.
	ls := c.mustTry(l, name, c.holdOpts())
	patience := max(100*time.Millisecond, 5*c.rtt)
	ctx, cancel := context.WithTimeout(c.ctx, patience)
	chs := make([]<-chan acq, 4)
	for i := range chs {
		chs[i] = c.acquireAsync(ctx, l, name, &dlock.AcquireOptions{TTL: 20 * c.ttl()})
	}
	for _, ch := range chs {
		select {
		case r := <-ch:
			if r.err == nil {
				c.release(r.ls, "sibling waiter")
				cancel()
				c.Fatalf("a sibling's Acquire was granted while another goroutine of its Locker held the lock")
			}
			if !errors.Is(r.err, context.DeadlineExceeded) {
				c.Errorf("a cancelled sibling waiter returned %v, want context.DeadlineExceeded", r.err)
			}
		case <-time.After(patience + c.fast()):
			cancel()
			c.Fatalf("a sibling waiter did not return within %v after its context ended", c.fast())
		}
	}
	cancel()
	c.release(ls, "holder")
	if rs, ok := c.h.(Residue); ok {
		if k, err := rs.Residue(c.ctx, name); err != nil || k != 0 {
			c.Errorf("after the sibling waiters were cancelled, Residue is %d (%v), want 0", k, err)
		}
	}
	c.expectFree(c.Locker(), name, "after every goroutine of one Locker released and its waiters were cancelled")
	c.expectFree(l, name, "for the same Locker, after its waiters were cancelled")
	c.Notef("%d grants to %d goroutines of one Locker", grants.Load(), n)
}

func caseIndependentNames(c *caseT) {
	a, b := c.Locker(), c.Locker()
	base := c.Name("p")
	ls := c.mustTry(a, base, c.holdOpts())
	others := []string{c.Name("q"), base + "/x", base + "x", base + " ", base[:len(base)-1], strings.ToUpper(base)}
	var held []*dlock.Lease
	for _, o := range others {
		ctx, cancel := c.withTimeout(c.fast() + 5*time.Second)
		start := time.Now()
		l2, err := b.TryAcquire(ctx, o, c.opts())
		cancel()
		if err != nil {
			c.Errorf("TryAcquire of %q while %q is held: %v, want it granted (distinct names are distinct locks)", o, base, err)
			continue
		}
		if d := time.Since(start); d > c.fast() {
			c.Errorf("TryAcquire of %q took %v while %q is held, bound %v", o, d, base, c.fast())
		}
		held = append(held, l2)
	}
	ctx, cancel := c.withTimeout(c.fast())
	l3, err := b.Acquire(ctx, c.Name("r"), c.opts())
	cancel()
	if err != nil {
		c.Errorf("Acquire of a free name while another is held: %v within %v", err, c.fast())
	} else {
		held = append(held, l3)
	}
	for _, h := range held {
		c.release(h, "independent name")
	}
	if ls.Err() != nil {
		c.Errorf("the first lease ended (%v) while other names were taken", ls.Err())
	}
	c.release(ls, "first name")
}

// dropLease ends ls on the server without its holder's help: by letting
// its TTL run out (ls must not be kept alive) or, on a session-bound
// backend, through the harness's Revoker. It returns a description, or ""
// when neither is possible.
func (c *caseT) dropLease(name string) string {
	if !c.caps.SessionBound {
		return "expiry"
	}
	if rv, ok := c.h.(Revoker); ok {
		if err := rv.Revoke(c.ctx, name); err != nil {
			c.Fatalf("harness Revoke(%q): %v", name, err)
		}
		return "revocation"
	}
	return ""
}

// takeOver acquires name from l once the server has dropped the previous
// holder (by expiry or revocation).
func (c *caseT) takeOver(l *dlock.Locker, name, how string) acq {
	bound := c.expiryNotice()
	if how == "expiry" {
		bound += c.ttl()
	}
	ctx, cancel := c.withTimeout(bound + 2*time.Second)
	defer cancel()
	r := <-c.acquireAsync(ctx, l, name, c.opts())
	if r.err != nil {
		c.Fatalf("another client could not take the lock after the holder's %s: %v", how, r.err)
	}
	return r
}

func caseReleaseSemantics(c *caseT) {
	a, b, o := c.Locker(), c.Locker(), c.Locker()
	name := c.Name("rel")
	ls := c.mustTry(a, name, c.opts())
	c.release(ls, "holder")
	if !waitDone(ls, c.fast()) {
		c.Errorf("Done did not close after Release")
	} else if !errors.Is(ls.Err(), dlock.ErrReleased) {
		c.Errorf("Err after Release is %v, want ErrReleased", ls.Err())
	}
	c.expectFree(b, name, "after Release")
	if err := ls.Release(c.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		c.Errorf("a second Release returned %v, want ErrNotHeld", err)
	}

	name2 := c.Name("stale")
	opts := c.noKeepAlive()
	if c.caps.SessionBound {
		opts = c.opts()
	}
	old := c.mustTry(a, name2, opts)
	how := c.dropLease(name2)
	if how == "" {
		c.Notef("part skipped: a session-bound backend without a Revoker hook cannot drop a lease")
		c.release(old, "holder")
		return
	}
	r := c.takeOver(b, name2, how)
	if err := old.Release(c.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		c.Errorf("Release of a lease that ended by %s returned %v, want ErrNotHeld", how, err)
	}
	c.expectHeld(o, name2, fmt.Sprintf("after the Release of a lease that ended by %s, the new holder must keep the lock", how))
	c.release(r.ls, "new holder")
}

func caseRefreshSemantics(c *caseT) {
	a, b := c.Locker(), c.Locker()
	name := c.Name("refresh")
	ls := c.mustTry(a, name, c.noKeepAlive())
	dl0, hasDL := ls.Deadline()
	for range 4 {
		c.sleep(c.ttl() / 2)
		ctx, cancel := c.withTimeout(c.fast() + 5*time.Second)
		err := ls.Refresh(ctx)
		cancel()
		if err != nil {
			c.Fatalf("Refresh of a held lease: %v", err)
		}
	}
	// Two TTLs have passed since the grant.
	if err := ls.Err(); err != nil {
		c.Errorf("the lease ended (%v) although it was refreshed every TTL/2", err)
	}
	c.expectHeld(b, name, "two TTLs after the grant, refreshed every TTL/2")
	if dl, _ := ls.Deadline(); hasDL && !dl.After(dl0.Add(c.ttl())) {
		c.Errorf("the lease's deadline did not move with the refreshes (%v after the first)", dl.Sub(dl0))
	}
	c.release(ls, "holder")

	parts := 0
	if !c.caps.SessionBound {
		parts++
		name2 := c.Name("expired")
		ls2 := c.mustTry(a, name2, c.noKeepAlive())
		// Done closes at the local deadline (the portable layer's timer);
		// the rule here is what Refresh does after it.
		if !waitDone(ls2, c.ttl()+c.fast()+5*time.Second) {
			c.Errorf("an unrefreshed lease did not end within its TTL of %v plus %v", c.ttl(), c.fast()+5*time.Second)
		}
		c.sleep(c.fast())
		if err := ls2.Refresh(c.ctx); !errors.Is(err, dlock.ErrNotHeld) {
			c.Errorf("Refresh after expiry returned %v, want ErrNotHeld", err)
		}
		c.expectFree(b, name2, "after a Refresh of an expired lease (it must not resurrect it)")
	}
	if rv, ok := c.h.(Revoker); ok {
		parts++
		name3 := c.Name("revoked")
		// A long TTL: the local deadline does not end it first.
		ls3 := c.mustTry(a, name3, &dlock.AcquireOptions{TTL: 20 * c.ttl(), NoKeepAlive: true})
		if err := rv.Revoke(c.ctx, name3); err != nil {
			c.Fatalf("harness Revoke(%q): %v", name3, err)
		}
		ctx, cancel := c.withTimeout(c.fast() + 5*time.Second)
		err := ls3.Refresh(ctx)
		cancel()
		if !errors.Is(err, dlock.ErrNotHeld) {
			c.Errorf("Refresh of a revoked lease returned %v, want ErrNotHeld", err)
		}
		c.expectFree(b, name3, "after a Refresh of a revoked lease (it must not resurrect it)")
	}
	if parts == 0 {
		c.Notef("part skipped: no server TTL and no Revoker hook: Refresh after a loss not checked")
	}
}

func caseKeepAlive(c *caseT) {
	a, b := c.Locker(), c.Locker()
	name := c.Name("alive")
	ls := c.mustTry(a, name, c.opts())
	if waitDone(ls, 5*c.ttl()) {
		c.Fatalf("the lease ended within 5×TTL despite keep-alive: %v", ls.Err())
	}
	c.expectHeld(b, name, "after 5×TTL with keep-alive")
	c.release(ls, "holder")

	if c.caps.SessionBound {
		c.Notef("part skipped: session-bound backend: no server-side TTL to expire")
		return
	}
	name2 := c.Name("noalive")
	start := time.Now()
	c.mustTry(a, name2, c.noKeepAlive())
	bound := c.ttl() + c.expiryNotice()
	ctx, cancel := c.withTimeout(bound + 2*time.Second)
	defer cancel()
	r := <-c.acquireAsync(ctx, b, name2, c.opts())
	if r.err != nil {
		c.Fatalf("another client did not get the lock of a lease without keep-alive (%v) within %v: the lease never expires on the server", r.err, bound+2*time.Second)
	}
	el := r.at.Sub(start)
	if el > bound {
		c.Errorf("another client got the lock %v after the grant without keep-alive, bound TTL %v + %v", el, c.ttl(), c.expiryNotice())
	}
	if el < c.ttl()*9/10 {
		c.Errorf("another client got the lock %v after the grant, before the TTL of %v: the server expired it early", el, c.ttl())
	}
	c.Notef("NoKeepAlive lease taken over %v after its grant (TTL %v)", el, c.ttl())
	c.release(r.ls, "new holder")
}

func caseExpiryHandOver(c *caseT) {
	a, b, o := c.Locker(), c.Locker(), c.Locker()
	var wg sync.WaitGroup
	for i := range 3 {
		name := c.Name(fmt.Sprintf("handover%d", i))
		ls := c.mustTry(a, name, c.noKeepAlive())
		wg.Go(func() { c.handOver(ls, b, o, name) })
	}
	wg.Wait()
}

// handOver polls name with TryAcquire from b around the expiry of ls
// (tightly from shortly before the holder's deadline, where a server that
// expires lazily must hand over exactly once), then checks that o is
// excluded.
func (c *caseT) handOver(ls *dlock.Lease, b, o *dlock.Locker, name string) {
	dl, _ := ls.Deadline()
	limit := dl.Add(c.expiryNotice())
	time.Sleep(time.Until(dl) - 20*time.Millisecond - 2*c.rtt)
	spinUntil := dl.Add(50*time.Millisecond + 5*c.rtt)
	for {
		ctx, cancel := c.quick()
		g, err := b.TryAcquire(ctx, name, c.opts())
		cancel()
		now := time.Now()
		if err == nil {
			if now.Before(dl) {
				c.Errorf("another client was granted %q %v before the holder's lease deadline", name, dl.Sub(now))
			}
			c.expectHeld(o, name, "right after another client took over an expired lease")
			c.release(g, "new holder")
			return
		}
		if !errors.Is(err, dlock.ErrNotAcquired) {
			c.Errorf("TryAcquire of %q around its holder's expiry: %v", name, err)
			return
		}
		if now.After(limit) {
			c.Errorf("the expired lease of %q was not handed over within %v of its deadline", name, c.expiryNotice())
			return
		}
		if now.After(spinUntil) {
			time.Sleep(time.Millisecond)
		} else {
			runtime.Gosched()
		}
	}
}

// restartBound is how long the harness may take to restart the servers.
const restartBound = 2 * time.Minute

func caseFencing(c *caseT) {
	ls := []*dlock.Locker{c.Locker(), c.Locker(), c.Locker()}
	name := c.Name("fence")
	var last uint64
	check := func(tok uint64, what string) {
		if tok <= last {
			c.Errorf("token %d after token %d (%s): tokens must strictly increase", tok, last, what)
		}
		last = max(last, tok)
	}
	for i := range 6 {
		l := c.mustTry(ls[i%3], name, c.opts())
		check(l.Token(), fmt.Sprintf("TryAcquire on locker %d", i%3))
		c.release(l, "holder")
	}
	h := c.mustTry(ls[0], name, c.holdOpts())
	check(h.Token(), "TryAcquire")
	ctx, cancel := c.withTimeout(c.wake() + 10*time.Second)
	ch := c.acquireAsync(ctx, ls[1], name, c.opts())
	c.sleep(5*c.rtt + 20*time.Millisecond)
	c.release(h, "holder")
	r := <-ch
	cancel()
	if r.err != nil {
		c.Fatalf("Acquire after release: %v", r.err)
	}
	check(r.ls.Token(), "a waiter's Acquire")
	c.release(r.ls, "waiter")

	opts := c.noKeepAlive()
	if c.caps.SessionBound {
		opts = c.opts()
	}
	old := c.mustTry(ls[2], name, opts)
	check(old.Token(), "TryAcquire")
	if how := c.dropLease(name); how != "" {
		r := c.takeOver(ls[0], name, how)
		check(r.ls.Token(), "after "+how)
		c.release(r.ls, "new holder")
	} else {
		c.Notef("part skipped: no server TTL and no Revoker hook")
		c.release(old, "holder")
	}

	rs, ok := c.h.(Restarter)
	switch {
	case !c.caps.TokensSurviveRestart:
		c.Notef("part skipped: the backend does not keep tokens across a restart")
	case !ok:
		c.Notef("part skipped: the harness has no Restarter hook")
	default:
		// Bounded: a server that does not come back (its port taken
		// while it was down, a slow machine) fails the case with the
		// harness's reason instead of hanging it until the watchdog.
		rctx, rcancel := c.withTimeout(restartBound)
		err := rs.RestartServer(rctx)
		rcancel()
		if err != nil {
			c.Fatalf("harness RestartServer: %v", err)
		}
		l := c.Locker()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := c.withTimeout(c.fast() + 5*time.Second)
			g, err := l.TryAcquire(ctx, name, c.opts())
			cancel()
			if err == nil {
				check(g.Token(), "after a server restart")
				c.release(g, "holder after restart")
				break
			}
			if time.Now().After(deadline) {
				c.Fatalf("TryAcquire after a server restart: %v", err)
			}
			c.sleep(100 * time.Millisecond)
		}
	}
}

func caseLossSignalled(c *caseT) {
	a, b := c.Locker(), c.Locker()
	parts := 0
	if rv, ok := c.h.(Revoker); ok {
		parts++
		name := c.Name("revoked")
		// The lease's own deadline (3×TTL) is far beyond the bound: a
		// keep-alive starved on a loaded machine cannot pass for a signal.
		ls := c.mustTry(a, name, &dlock.AcquireOptions{TTL: 3 * c.ttl()})
		start := time.Now()
		if err := rv.Revoke(c.ctx, name); err != nil {
			c.Fatalf("harness Revoke(%q): %v", name, err)
		}
		bound := c.ttl() + c.fast()
		if c.caps.SessionBound {
			bound = c.fast() + c.crashBound()
		}
		if !waitDone(ls, bound) {
			c.Errorf("Done did not close within %v after the server dropped the lease: the loss is never signalled", bound)
			c.release(ls, "revoked holder")
		} else {
			if !errors.Is(ls.Err(), dlock.ErrLockLost) {
				c.Errorf("Err after the server dropped the lease is %v, want ErrLockLost", ls.Err())
			}
			c.Notef("revocation signalled after %v", time.Since(start))
		}
	}
	if !c.caps.SessionBound {
		parts++
		name := c.Name("unrefreshed")
		ls := c.mustTry(a, name, c.noKeepAlive())
		dl, _ := ls.Deadline()
		bound := c.ttl() + c.expiryNotice()
		ctx, cancel := c.withTimeout(bound + 2*time.Second)
		r := <-c.acquireAsync(ctx, b, name, c.opts())
		cancel()
		if r.err != nil {
			c.Errorf("another client did not get an unrefreshed lock within %v: %v", bound+2*time.Second, r.err)
		} else {
			if r.at.Before(dl) {
				c.Errorf("another client was granted the lock %v before the holder's lease deadline: the server expired it earlier than the TTL promised to the holder", dl.Sub(r.at))
			}
			if !waitDone(ls, max(time.Until(dl), 0)+c.fast()+5*time.Second) {
				c.Errorf("the unrefreshed lease's Done did not close after its deadline")
			} else if !errors.Is(ls.Err(), dlock.ErrLockLost) {
				c.Errorf("Err of an expired lease is %v, want ErrLockLost", ls.Err())
			}
			c.release(r.ls, "new holder")
		}
	}
	if dc, ok := c.h.(Disconnector); ok {
		parts++
		name := c.Name("cut")
		victim := c.Locker()
		ls := c.mustTry(victim, name, c.opts())
		var doneAt atomic.Int64
		t0 := time.Now()
		go func() {
			<-ls.Done()
			doneAt.Store(int64(time.Since(t0)) + 1)
		}()
		if err := dc.Disconnect(c.ctx, victim); err != nil {
			c.Fatalf("harness Disconnect: %v", err)
		}
		bound := c.crashBound() + c.ttl() + c.expiryNotice()
		ctx, cancel := c.withTimeout(bound + 5*time.Second)
		r := <-c.acquireAsync(ctx, b, name, c.opts())
		cancel()
		if r.err != nil {
			c.Errorf("another client did not get the lock of a disconnected holder within %v: %v", bound+5*time.Second, r.err)
		} else {
			grant := r.at.Sub(t0)
			// Allow 50ms for the goroutine that records Done to run.
			time.Sleep(50 * time.Millisecond)
			d := time.Duration(doneAt.Load())
			switch {
			case d == 0:
				c.Errorf("another client was granted the lock %v after the holder was cut off, and the holder has not been told", grant)
			case d-1 > grant+50*time.Millisecond:
				c.Errorf("the cut-off holder was told %v after the disconnect, after another client was granted the lock (%v)", d-1, grant)
			}
			c.release(r.ls, "new holder")
		}
	}
	if parts == 0 {
		c.Skipf("no way to make the server drop a lease: session-bound backend without Revoker or Disconnector hooks")
	}
}

func caseReentrancy(c *caseT) {
	a, b := c.Locker(), c.Locker()
	name := c.Name("reentrant")
	own := &dlock.AcquireOptions{TTL: 5 * c.ttl(), Owner: "owner-1"}
	l1 := c.mustTry(a, name, own)
	ctx, cancel := c.withTimeout(c.fast())
	start := time.Now()
	l2, err := a.Acquire(ctx, name, own)
	cancel()
	if err != nil {
		c.Fatalf("a second Acquire by the same Owner on the same Locker: %v, want it at once", err)
	}
	if d := time.Since(start); d > c.fast() {
		c.Errorf("the reentrant Acquire took %v, bound %v", d, c.fast())
	}
	if l2.Token() != l1.Token() {
		c.Errorf("the reentrant lease has token %d, the outer one %d: want the same grant", l2.Token(), l1.Token())
	}
	c.expectHeld(b, name, "while an Owner holds it twice")
	qctx, qcancel := c.quick()
	defer qcancel()
	if ls, err := a.TryAcquire(qctx, name, &dlock.AcquireOptions{TTL: c.ttl(), Owner: "owner-2"}); err == nil {
		c.release(ls, "other owner")
		c.Errorf("another Owner on the same Locker got the lock held by owner-1")
	}
	if ls, err := b.TryAcquire(qctx, name, own); err == nil {
		c.release(ls, "same owner on another client")
		c.Errorf("the same Owner on another Locker (another client) got the lock: reentrancy is per Locker")
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		c.Errorf("the same Owner on another Locker: %v, want ErrNotAcquired", err)
	}
	c.release(l1, "first release")
	if l2.Err() != nil {
		c.Errorf("the first of two releases ended the lease: %v", l2.Err())
	}
	c.expectHeld(b, name, "after the first of two releases")
	c.release(l2, "second release")
	c.expectFree(b, name, "after the second of two releases")
}

func caseFairness(c *caseT) {
	const n = 5
	a := c.Locker()
	name := c.Name("fair")
	ls := c.mustTry(a, name, c.holdOpts())
	order := make(chan int, n)
	errs := make(chan error, n)
	ctx, cancel := c.withTimeout(time.Duration(n)*c.wake() + 20*time.Second)
	defer cancel()
	gap := 10*c.rtt + 50*time.Millisecond
	for i := range n {
		w := c.Locker()
		go func() {
			ls, err := w.Acquire(ctx, name, c.opts())
			if err != nil {
				errs <- err
				return
			}
			order <- i
			_ = ls.Release(ctx)
		}()
		c.sleep(gap)
	}
	c.release(ls, "holder")
	var got []int
	for range n {
		select {
		case i := <-order:
			got = append(got, i)
		case err := <-errs:
			c.Fatalf("waiter: %v", err)
		case <-ctx.Done():
			c.Fatalf("waiters not granted: %v", ctx.Err())
		}
	}
	for i, g := range got {
		if g != i {
			c.Errorf("waiters were granted in the order %v, want their arrival order 0..%d", got, n-1)
			break
		}
	}
}

func caseBadInput(c *caseT) {
	a, b := c.Locker(), c.Locker()
	badNames(c, a)
	badTTLs(c, a, b)
	zeroTTL(c, a)
	unusualNames(c, a, b)
}

// expectRefused reports a call that did not fail with want (named
// wantName), releasing what it granted (what).
func (c *caseT) expectRefused(ls *dlock.Lease, err, want error, wantName, what, call string) {
	if errors.Is(err, want) {
		return
	}
	if err == nil {
		c.release(ls, what)
	}
	c.Errorf("%s returned %v, want %s", call, err, wantName)
}

// badNames: an empty, invalid UTF-8 or too long name is ErrInvalidName.
func badNames(c *caseT, a *dlock.Locker) {
	bad := []struct{ name, why string }{
		{"", "empty"},
		{c.Name("\xff\xfe"), "invalid UTF-8"},
		{strings.Repeat("x", dlock.MaxNameLen+1), "longer than 1024 bytes"},
	}
	if m := c.caps.MaxNameLen; m > 0 && m < dlock.MaxNameLen {
		bad = append(bad, struct{ name, why string }{strings.Repeat("y", m+1), fmt.Sprintf("longer than the backend's %d bytes", m)})
	}
	for _, x := range bad {
		ls, err := a.TryAcquire(c.ctx, x.name, c.opts())
		c.expectRefused(ls, err, dlock.ErrInvalidName, "ErrInvalidName", "bad name", "TryAcquire of an "+x.why+" name")
		ctx, cancel := c.withTimeout(c.fast())
		ls, err = a.Acquire(ctx, x.name, c.opts())
		c.expectRefused(ls, err, dlock.ErrInvalidName, "ErrInvalidName", "bad name", "Acquire of an "+x.why+" name")
		cancel()
	}
}

// badTTLs: a negative or sub-millisecond TTL is ErrInvalidOption, and
// leaves nothing behind.
func badTTLs(c *caseT, a, b *dlock.Locker) {
	name := c.Name("ttl")
	for _, ttl := range []time.Duration{-time.Second, 500 * time.Microsecond} {
		ls, err := a.TryAcquire(c.ctx, name, &dlock.AcquireOptions{TTL: ttl})
		c.expectRefused(ls, err, dlock.ErrInvalidOption, "ErrInvalidOption", "bad TTL", fmt.Sprintf("TryAcquire with TTL %v", ttl))
		ls, err = a.Acquire(c.ctx, name, &dlock.AcquireOptions{TTL: ttl})
		c.expectRefused(ls, err, dlock.ErrInvalidOption, "ErrInvalidOption", "bad TTL", fmt.Sprintf("Acquire with TTL %v", ttl))
	}
	c.expectFree(b, name, "after calls rejected for their TTL")
	if rs, ok := c.h.(Residue); ok {
		if k, err := rs.Residue(c.ctx, name); err != nil || k != 0 {
			c.Errorf("after calls rejected for their TTL, Residue is %d (%v), want 0", k, err)
		}
	}
}

// zeroTTL: a zero TTL is the default.
func zeroTTL(c *caseT, a *dlock.Locker) {
	ls, err := a.TryAcquire(c.ctx, c.Name("zero"), &dlock.AcquireOptions{TTL: 0})
	if err != nil {
		c.Errorf("TryAcquire with a zero TTL (the default): %v", err)
		return
	}
	if ls.TTL() != dlock.DefaultTTL {
		c.Errorf("a zero TTL gave a lease of %v, want the default %v", ls.TTL(), dlock.DefaultTTL)
	}
	c.release(ls, "zero TTL")
}

// unusualNames: each is either rejected with ErrInvalidName or stored
// exactly; all are held at once, so two that collide show.
func unusualNames(c *caseT, a, b *dlock.Locker) {
	prefix := c.Name("n")
	odd := []string{"\x00", "a\x00b", "a/b", "a//b", "/", "/a/", "../up", ".", "..", " ", "a b", "a\nb", "\t",
		"ключ", "🔒", "%2F", "%", "*", "?", "a:b", "'", `"`, `\`, "{tag}", "\u200b", "é", "e\u0301"}
	limit := dlock.MaxNameLen
	if m := c.caps.MaxNameLen; m > 0 && m < limit {
		limit = m
	}
	names := make([]string, 0, len(odd)+1)
	for _, s := range odd {
		names = append(names, prefix+s)
	}
	names = append(names, prefix+strings.Repeat("z", limit-len(prefix)))
	type heldName struct {
		name string
		ls   *dlock.Lease
	}
	var held []heldName
	var rejected []string
	for _, n := range names {
		ctx, cancel := c.withTimeout(c.fast() + time.Second)
		// Held while every other is checked: holdOpts, so that a
		// keep-alive starved on a loaded machine does not end one (a
		// forupdate lease's session then ends at its idle timeout).
		ls, err := a.TryAcquire(ctx, n, c.holdOpts())
		cancel()
		switch {
		case err == nil:
			held = append(held, heldName{n, ls})
		case errors.Is(err, dlock.ErrInvalidName):
			rejected = append(rejected, fmt.Sprintf("%q", strings.TrimPrefix(n, prefix)))
		case errors.Is(err, dlock.ErrNotAcquired):
			c.Errorf("the name %q collides with another name held at the same time: TryAcquire returned %v", n, err)
		default:
			c.Errorf("TryAcquire of the name %q returned %v, want a grant or ErrInvalidName", n, err)
		}
	}
	if len(rejected) > 0 {
		c.Notef("names rejected by the backend: %s", strings.Join(rejected, " "))
	}
	for _, h := range held {
		if !c.expectHeld(b, h.name, "an unusual name held by another client") {
			break
		}
	}
	for _, h := range held {
		c.release(h.ls, "unusual name")
	}
	if len(held) > 0 {
		c.expectFree(b, held[0].name, "after releasing an unusual name")
	}
}

func caseTTLRange(c *caseT) {
	a, b := c.Locker(), c.Locker()
	lo, hi := max(c.caps.MinTTL, dlock.MinTTL), c.caps.MaxTTL
	if hi != 0 && hi < lo {
		c.Fatalf("Capabilities declare MaxTTL %v below MinTTL %v", hi, lo)
	}
	name := c.Name("range")
	outside := []time.Duration{lo - time.Nanosecond}
	if hi > 0 {
		outside = append(outside, hi+time.Nanosecond, time.Duration(math.MaxInt64))
	}
	for _, ttl := range outside {
		for _, try := range []bool{true, false} {
			var ls *dlock.Lease
			var err error
			if try {
				ls, err = a.TryAcquire(c.ctx, name, &dlock.AcquireOptions{TTL: ttl, NoKeepAlive: true})
			} else {
				ls, err = a.Acquire(c.ctx, name, &dlock.AcquireOptions{TTL: ttl, NoKeepAlive: true})
			}
			if !errors.Is(err, dlock.ErrInvalidOption) {
				if err == nil {
					c.release(ls, "TTL outside the declared range")
				}
				c.Errorf("a TTL of %v, outside the declared range [%v, %v], returned %v, want ErrInvalidOption", ttl, lo, hi, err)
			}
		}
	}
	c.expectFree(b, name, "after calls refused for a TTL outside the declared range")
	if rs, ok := c.h.(Residue); ok {
		if k, err := rs.Residue(c.ctx, name); err != nil || k != 0 {
			c.Errorf("after calls refused for their TTL, Residue is %d (%v), want 0", k, err)
		}
	}

	// The longest TTL: a server-side timeout computed from it must not
	// overflow to a short one. 2.5s outlasts a 1ms or 1s wrapped timeout
	// and a timer of one-second granularity.
	long := hi
	if long == 0 {
		long = time.Duration(math.MaxInt64)
	}
	ls := c.mustTry(a, name, &dlock.AcquireOptions{TTL: long, NoKeepAlive: true})
	c.sleep(2500 * time.Millisecond)
	if err := ls.Err(); err != nil {
		c.Errorf("a lease with the longest TTL (%v) and no keep-alive ended within 2.5s: %v", long, err)
	}
	c.expectHeld(b, name, fmt.Sprintf("a lease with the longest TTL (%v) and no keep-alive, 2.5s after its grant", long))
	c.release(ls, "longest TTL")

	// The shortest TTL: it holds until Done, and the server lets it go
	// soon after (a lease that ended locally does not keep the lock).
	if c.caps.SessionBound {
		c.Notef("declared TTL range [%v, %v]; session-bound: the shortest TTL's expiry is not checked", lo, hi)
		return
	}
	short := c.Name("short")
	ls = c.mustTry(a, short, &dlock.AcquireOptions{TTL: lo, NoKeepAlive: true})
	t := time.NewTimer(lo + c.fast() + 5*time.Second)
	defer t.Stop()
	select {
	case <-ls.Done():
	case <-t.C:
		c.Fatalf("a lease with the shortest TTL %v and no keep-alive did not end within %v", lo, lo+c.fast()+5*time.Second)
	}
	ended := time.Now()
	bound := c.expiryNotice() + c.fast()
	ctx, cancel := c.withTimeout(bound + 5*time.Second)
	defer cancel()
	next, err := b.Acquire(ctx, short, c.opts())
	if err != nil {
		c.Fatalf("after a lease with the shortest TTL %v ended, another client could not take the lock: %v", lo, err)
	}
	if el := time.Since(ended); el > bound {
		c.Errorf("a lease with the shortest TTL %v ended locally %v before the server let another client take the lock (bound %v): the server kept a lock its holder had already given up", lo, el, bound)
	}
	c.release(next, "after the shortest TTL")
	c.Notef("declared TTL range [%v, %v]", lo, hi)
}

func caseClose(c *caseT) {
	a, b := c.Locker(), c.Locker()
	name, busy := c.Name("close"), c.Name("busy")
	ls := c.mustTry(a, name, c.holdOpts())
	blocker := c.mustTry(b, busy, c.holdOpts())
	ctx, cancel := c.withTimeout(c.fast() + 10*time.Second)
	defer cancel()
	inflight := c.acquireAsync(ctx, a, busy, c.opts())
	c.sleep(5*c.rtt + 20*time.Millisecond)
	if err := a.Close(); err != nil {
		c.Errorf("Close: %v", err)
	}
	if !waitDone(ls, c.fast()) {
		c.Errorf("a lease's Done did not close when its Locker was closed")
	} else if !errors.Is(ls.Err(), dlock.ErrClosed) {
		c.Errorf("Err of a lease whose Locker was closed is %v, want ErrClosed", ls.Err())
	}
	select {
	case r := <-inflight:
		if r.err == nil {
			c.Errorf("an Acquire in flight was granted after Close")
		} else if !errors.Is(r.err, dlock.ErrClosed) {
			c.Errorf("an Acquire in flight when Close was called returned %v, want ErrClosed", r.err)
		}
	case <-time.After(c.fast()):
		c.Errorf("an Acquire in flight did not return within %v of Close", c.fast())
	}
	c.expectFree(b, name, "after its holder's Locker was closed (Close releases its leases)")
	if _, err := a.TryAcquire(c.ctx, c.Name("after"), c.opts()); !errors.Is(err, dlock.ErrClosed) {
		c.Errorf("TryAcquire after Close returned %v, want ErrClosed", err)
	}
	if _, err := a.Acquire(c.ctx, c.Name("after"), c.opts()); !errors.Is(err, dlock.ErrClosed) {
		c.Errorf("Acquire after Close returned %v, want ErrClosed", err)
	}
	if err := ls.Refresh(c.ctx); err == nil {
		c.Errorf("Refresh of a lease after Close succeeded")
	}
	if err := ls.Release(c.ctx); err == nil {
		c.Errorf("Release of a lease after Close succeeded, want ErrNotHeld")
	}
	if err := a.Close(); err != nil {
		c.Errorf("a second Close returned %v, want nil", err)
	}
	// Nothing renews the closed Locker's lease: another client keeps it
	// after a few TTLs.
	l2 := c.mustTry(b, name, c.opts())
	c.sleep(2 * c.ttl())
	if l2.Err() != nil {
		c.Errorf("the new holder lost the lock (%v) after the old Locker was closed", l2.Err())
	}
	c.release(l2, "new holder")
	c.release(blocker, "busy holder")
}

// CaseInfo names a case and states its rule.
type CaseInfo struct {
	Name string
	Rule string
}

// Cases lists the suite's cases in the order they run.
func Cases() []CaseInfo {
	out := make([]CaseInfo, len(cases))
	for i, cs := range cases {
		out[i] = CaseInfo{cs.name, cs.rule}
	}
	return out
}
