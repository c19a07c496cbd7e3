package etcd

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Spare etcd leases. Every dlock lease lives under an etcd lease of its
// own, so that a lease nobody refreshes expires on the server after its
// TTL whatever the Locker's other leases do. Granting that etcd lease on
// each acquisition and revoking it after each release costs two round
// trips around the lock's own two (concurrency.Mutex avoids them with one
// session lease for every lock, which a lease without keep-alive cannot
// use). So a released etcd lease whose key the release deleted is kept,
// alive and without keys, as a spare for the next acquisition with the
// same TTL: the acquisition is then one transaction and the release one.
//
// A spare is renewed every third of its TTL while it waits, never while it
// is in use (a lease's expiry is its holder's business alone), and its
// last renewal's start is the grant time of the lease that takes it: the
// server holds it a TTL from then at least. Spares unused for idleFor are
// revoked; Close revokes the rest.
type spares struct {
	l       *locker
	mu      sync.Mutex
	free    map[int64][]spare // by TTL in seconds, most recently renewed last
	running bool              // the renewing goroutine runs
	wake    chan struct{}
	// next is when the renewing goroutine wakes next, as it computed it
	// from the spares kept then: put wakes it only for a spare due
	// before (a spare put back after use is due when it was before).
	next time.Time
	// takenDue is the earliest due of the spares taken since the renewing
	// goroutine last computed next (zero: none). They come back due when
	// they were, so it counts them as kept: a lock taken and released over
	// and over puts its spare back without waking the goroutine each
	// time (it did: it had found the spare taken, and slept for an hour).
	takenDue time.Time
}

// spare is an etcd lease without keys.
type spare struct {
	id       clientv3.LeaseID
	tag      uint64    // drawn at its grant: its keys' names (keyOf)
	ttl      int64     // seconds
	renewed  time.Time // start of its last successful grant or renewal
	returned time.Time // when it was last given back
}

// Bounds of the spares: at most maxSpares kept per TTL (the releases of
// more concurrent leases revoke theirs), each for idleFor without use.
const (
	maxSpares = 8
	idleFor   = 30 * time.Second
)

// due is when sp is to be renewed: a third of its TTL after the last
// renewal.
func (s *spare) due() time.Time { return s.renewed.Add(time.Duration(s.ttl) * time.Second / 3) }

func (s *spare) fresh(now time.Time) bool {
	return now.Sub(s.renewed) < time.Duration(s.ttl)*time.Second/2
}

// take returns a spare of ttl seconds whose server-side expiry is at
// least half a TTL away, if there is one.
func (p *spares) take(ttl int64) (spare, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.free[ttl]
	now := time.Now()
	for i := len(list) - 1; i >= 0; i-- {
		if sp := list[i]; sp.fresh(now) {
			p.free[ttl] = append(list[:i], list[i+1:]...)
			if at := sp.due(); p.takenDue.IsZero() || at.Before(p.takenDue) {
				p.takenDue = at
			}
			return sp, true
		}
	}
	return spare{}, false
}

// put keeps sp as a spare, or revokes it when there are enough already or
// the Locker is closing.
func (p *spares) put(sp spare) {
	sp.returned = time.Now()
	p.mu.Lock()
	if len(p.free[sp.ttl]) >= maxSpares || !sp.fresh(sp.returned) || p.l.isClosed() {
		p.mu.Unlock()
		p.l.revokeLater(sp.id)
		return
	}
	if p.free == nil {
		p.free = make(map[int64][]spare)
		p.wake = make(chan struct{}, 1)
	}
	p.free[sp.ttl] = append(p.free[sp.ttl], sp)
	start := !p.running
	p.running = true
	wake := sp.due().Before(p.next)
	p.mu.Unlock()
	if wake {
		select {
		case p.wake <- struct{}{}: // the renewer recomputes its next wake-up
		default:
		}
	}
	if start && !p.l.background(p.renew) {
		p.mu.Lock()
		p.running = false
		p.mu.Unlock()
	}
}

// renew keeps the spares alive until the Locker closes: it sleeps until
// the next spare is a third of its TTL old (or idle too long), takes the
// due ones out (so that no acquisition takes a spare while it is being
// renewed), renews or revokes them, and puts the renewed ones back.
func (p *spares) renew() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var due []spare
		p.mu.Lock()
		now := time.Now()
		for ttl, list := range p.free {
			keep := list[:0]
			for _, sp := range list {
				if !sp.due().After(now) || now.Sub(sp.returned) >= idleFor {
					due = append(due, sp)
					continue
				}
				keep = append(keep, sp)
			}
			p.free[ttl] = keep
		}
		p.mu.Unlock()
		for _, sp := range due {
			if time.Since(sp.returned) >= idleFor {
				p.l.revoke(sp.id)
				continue
			}
			if p.l.renewSpare(&sp) {
				p.mu.Lock()
				p.free[sp.ttl] = append(p.free[sp.ttl], sp)
				p.mu.Unlock()
			}
		}
		// The next wake-up, from the spares kept now, under the lock
		// that put takes: a spare put after this is compared with it.
		p.mu.Lock()
		next := p.nextWakeLocked(time.Now())
		p.next = next
		p.mu.Unlock()
		t.Reset(time.Until(next))
		select {
		case <-p.l.closing.Done():
			return
		case <-t.C:
		case <-p.wake:
		}
	}
}

// nextWakeLocked is when the renewing goroutine is to wake next, from
// now: the earliest due of the spares kept and of those taken since it
// last looked (they come back due when they were; one due already is
// renewed when it comes back, whose put wakes the goroutine), or in an
// hour. It forgets the taken ones. p.mu is held.
func (p *spares) nextWakeLocked(now time.Time) time.Time {
	next := now.Add(time.Hour)
	for _, list := range p.free {
		for _, sp := range list {
			if at := sp.due(); at.Before(next) {
				next = at
			}
		}
	}
	if at := p.takenDue; at.After(now) && at.Before(next) {
		next = at
	}
	p.takenDue = time.Time{}
	return next
}

// renewSpare renews sp (its renewal time is the request's start); false
// when the server no longer has it or the renewal failed (then it is
// revoked: a spare of uncertain life is not worth keeping).
func (l *locker) renewSpare(sp *spare) bool {
	ctx, cancel := context.WithTimeout(l.closing, time.Duration(sp.ttl)*time.Second/3)
	defer cancel()
	start := time.Now()
	ttlSec, err := l.renewer.renew(ctx, sp.id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return false
	case err != nil || ttlSec < sp.ttl:
		l.revokeLater(sp.id)
		return false
	}
	sp.renewed = start
	return true
}

// drain revokes every spare (Close).
func (p *spares) drain() {
	p.mu.Lock()
	var all []spare
	for _, list := range p.free {
		all = append(all, list...)
	}
	clear(p.free)
	p.mu.Unlock()
	for _, sp := range all {
		p.l.revoke(sp.id)
	}
}

// revoke revokes an etcd lease with a fresh bounded context.
func (l *locker) revoke(id clientv3.LeaseID) {
	ctx, cancel := cleanupCtx()
	defer cancel()
	_, _ = l.cli.Revoke(ctx, id)
}

// revokeLater revokes an etcd lease off the caller's path (Close waits
// for it; once closed, at once).
func (l *locker) revokeLater(id clientv3.LeaseID) {
	if !l.background(func() { l.revoke(id) }) {
		l.revoke(id)
	}
}

// background runs f in a goroutine that Close waits for; false (f not
// run) once the Locker is closed.
func (l *locker) background(f func()) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		f()
	}()
	return true
}

// The spare second. An etcd lease for a TTL of spareSecondFrom seconds or
// more is granted one second longer than the TTL (etcd leases are whole
// seconds): renewed at r, the server holds it until r + TTL + 1s at the
// earliest, so for reuseWindow after r it holds it a whole TTL from now
// already, and an acquisition in that window needs no renewal (a spare
// taken, a waiter granted). The grant time it reports is the
// acquisition's start: the etcd lease of TTL + 1s the server began at r
// or later is a lease of the TTL begun at r + 1s or later. The window is
// a second less reuseMargin, which covers a server clock that runs up to
// 10% fast over that second (the portable layer's drift margin covers
// the TTL itself). The price: a dead holder's lock outlives its TTL by up
// to one more second, a tenth of the TTL at most, hence the threshold;
// shorter TTLs keep leases of exactly the TTL and renew at each
// acquisition.
const (
	spareSecondFrom = 10 // seconds
	reuseMargin     = 100 * time.Millisecond
)

// leaseSeconds is the TTL of the etcd lease for a TTL of ttl seconds.
func leaseSeconds(ttl int64) int64 {
	if ttl >= spareSecondFrom {
		return ttl + 1
	}
	return ttl
}

// reuseWindow is how long after the start of its last renewal an etcd
// lease for a TTL of ttl seconds still holds a whole TTL: zero without
// the spare second.
func reuseWindow(ttl int64) time.Duration {
	if ttl >= spareSecondFrom {
		return time.Second - reuseMargin
	}
	return 0
}
