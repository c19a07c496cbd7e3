package mysql

import (
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// The version strategy's waiters poll: MariaDB and MySQL have no NOTIFY,
// and a held version lease pins no connection whose lock a waiter could
// queue on. The portable layer's backoff (2 → 100 ms, full jitter) knows
// nothing of the lock. A refused take answers the holder's lease age
// (heldAge), and waitHints turns it into the next wait (VersionHint):
// when the holder should release, judged by this Locker's own holds of
// the name, but never sooner than half of how long this Locker has been
// refused the name. That floor keeps a waiter's attempts to a few per
// doubling of its wait, as the backoff's are, so that the server's load
// per grant stays bounded however many wait; and the hint only ever
// shortens the backoff's wait.

var _ sqllock.VersionHinter = dialect{}

// waitHints is what a Locker knows of the names it waits on.
type waitHints struct {
	mu sync.Mutex
	m  map[string]*nameWait
}

// nameWait is a name's state at one Locker.
type nameWait struct {
	since time.Time     // first refused attempt of the current wait (zero: none)
	last  time.Time     // last refused attempt
	hold  time.Duration // this Locker's holds of the name, averaged (0: none yet)
}

const (
	// maxHintNames bounds waitHints.m (adding one more forgets them all).
	maxHintNames = 4096
	// waitGap: a refusal that comes longer than this after the last one
	// starts a new wait (the portable layer tries at least every 100 ms
	// plus the hint while it waits).
	waitGap = 250 * time.Millisecond
	// minHint is the portable layer's shortest wait after a hint
	// (driver.NotAcquiredError.RetryAfter plus a millisecond).
	minHint = time.Millisecond
)

// entry returns name's state, creating it; w.mu is held.
func (w *waitHints) entry(name string) *nameWait {
	e := w.m[name]
	if e == nil {
		if w.m == nil || len(w.m) >= maxHintNames {
			w.m = make(map[string]*nameWait)
		}
		e = &nameWait{}
		w.m[name] = e
	}
	return e
}

// VersionHint is the wait after a refused attempt on name that took rtt
// and found the lease held for age. It is the moment the holder should
// release: this Locker's average hold minus age, less the attempt's round
// trip (the server ran the attempt half a round trip after it was sent,
// and the next one reaches it half a round trip after it is sent). When
// that is sooner than the floor, half of this Locker's wait on name so
// far: a later holder's release (one hold and a round trip more per
// holder; a guess, as handovers vary); when the floor is the portable
// layer's shortest wait after a hint (a millisecond), that wait, for the
// lease freed meanwhile. Without a hold of its own to judge by, the wait
// is age (a lock held for a while is likely to be held as long again), at
// least the floor.
func (d dialect) VersionHint(name string, age, rtt time.Duration) time.Duration {
	w := d.hints
	if w == nil {
		return 0
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.entry(name)
	if e.since.IsZero() || now.Sub(e.last) > waitGap {
		e.since = now
	}
	e.last = now
	floor := now.Sub(e.since) / 2
	if e.hold <= 0 {
		return max(age, floor, minHint)
	}
	t := e.hold - age - rtt
	switch {
	case t >= max(floor, minHint):
		return t
	case floor <= minHint:
		return minHint
	}
	cycle := e.hold + rtt
	return t + ((floor-t)/cycle+1)*cycle
}

// VersionGranted ends this Locker's wait on name.
func (d dialect) VersionGranted(name string) {
	w := d.hints
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[name]; e != nil {
		e.since = time.Time{}
	}
}

// VersionHeld averages a hold of name by this Locker into its estimate
// (a quarter weight for the newest).
func (d dialect) VersionHeld(name string, held time.Duration) {
	w := d.hints
	if w == nil || held <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.entry(name)
	if e.hold == 0 {
		e.hold = held
	} else {
		e.hold += (held - e.hold) / 4
	}
}
