package dlock

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// keeper is a Locker's one keep-alive scheduler: a heap of holds ordered by
// their next event (a refresh due at TTL/3, or the local deadline) and one
// runtime timer (time.AfterFunc) armed at the earliest event, whose func
// fires the due holds. A lease costs a heap entry, not a goroutine and two
// timers.
//
// The timer, not a goroutine woken by a channel, is what keeps the
// acquire and release paths free of scheduler trips: an acquire arms the
// timer only when its hold's event comes before the time the timer is
// armed for (a release leaves the timer as it is; it fires, finds nothing
// due and re-arms for the earliest hold, if any). With a goroutine woken
// on every such arm, an uncontended acquire+release cycle in a busy
// process woke it on nearly every acquire: the goroutine ran after the
// release, found the heap empty and disarmed, so that the next acquire
// woke it again, each wake a trip through the scheduler on the caller's
// path (about 25 µs per cycle on a loaded 2-core machine, measured with
// runtime/trace in dlockbench's whole suite).
//
// A refresh runs in a goroutine of its own, so that one slow server call
// delays no other hold's refresh and no deadline; a hold has at most one
// keep-alive refresh in flight. The hold's deadline stays in the heap while
// its refresh is in flight: Done closes at the deadline even when the
// refresh hangs, and a refresh that returns after it does not revive the
// hold (hold.refreshWith).
type keeper struct {
	l *Locker

	mu      sync.Mutex
	q       holdQueue
	armed   time.Time   // when the timer fires; zero: not armed
	timer   *time.Timer // made by the first arm
	arms    int         // how many times the timer was armed (tests)
	stopped bool
}

func (k *keeper) init(l *Locker) {
	k.l = l
}

// start adds a new hold. l.mu is held and l is not closed.
func (k *keeper) start(h *hold) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.placeLocked(h)
}

// reschedule puts h back in the heap at its next event, unless it has
// ended.
func (k *keeper) reschedule(h *hold) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.placeLocked(h)
}

// placeLocked puts h in the heap at its next event (or takes it out when
// it has none). The event is read under k.mu, so that of two concurrent
// reschedules (the keeper's and a refresh's) the later one sees the later
// state. k.mu is held; it is taken before h.mu, never after.
func (k *keeper) placeLocked(h *hold) {
	if h.unscheduled {
		return
	}
	h.mu.Lock()
	at := h.nextEvent()
	h.mu.Unlock()
	if at.IsZero() {
		if h.index >= 0 {
			heap.Remove(&k.q, h.index)
		}
		return
	}
	h.at = at
	if h.index >= 0 {
		heap.Fix(&k.q, h.index)
	} else {
		heap.Push(&k.q, h)
	}
	if h.index == 0 && (k.armed.IsZero() || at.Before(k.armed)) {
		k.armLocked(at)
	}
}

// armLocked arms the timer to fire at at. k.mu is held.
func (k *keeper) armLocked(at time.Time) {
	if k.stopped {
		return
	}
	k.armed = at
	k.arms++
	d := time.Until(at)
	if k.timer == nil {
		k.timer = time.AfterFunc(d, k.tick)
		return
	}
	k.timer.Reset(d)
}

// remove takes an ended hold out of the heap for good. The timer stays
// armed: it fires, finds nothing due, and re-arms for the earliest hold.
func (k *keeper) remove(h *hold) {
	k.mu.Lock()
	h.unscheduled = true
	if h.index >= 0 {
		heap.Remove(&k.q, h.index)
	}
	k.mu.Unlock()
}

// close stops the timer (Close has ended every hold). A tick already
// running is counted in l.wg, which Close waits for.
func (k *keeper) close() {
	k.mu.Lock()
	k.stopped = true
	k.armed = time.Time{}
	if k.timer != nil {
		k.timer.Stop()
	}
	k.mu.Unlock()
}

// tick is the timer's func: it fires every hold whose event is due, then
// arms the timer for the next one. Two ticks may overlap (a hold placed
// earlier than the armed time re-arms the timer while a tick fires); each
// pops its holds from the heap under k.mu, so no hold fires twice at once.
func (k *keeper) tick() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.l.wg.Add(1) // before Close's Wait: stopped is set under k.mu first
	defer k.l.wg.Done()
	k.armed = time.Time{}
	var due []*hold
	for {
		now := time.Now()
		for len(k.q) > 0 && !k.q[0].at.After(now) {
			due = append(due, heap.Pop(&k.q).(*hold))
		}
		if len(due) == 0 {
			if len(k.q) > 0 && (k.armed.IsZero() || k.q[0].at.Before(k.armed)) {
				k.armLocked(k.q[0].at)
			}
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		for i, h := range due {
			k.fire(h)
			due[i] = nil
		}
		due = due[:0]
		k.mu.Lock()
	}
}

// fire handles one due hold: it ends it at its deadline (reading the clock,
// as hold.check does), starts its refresh when one is due, and puts it back
// in the heap at its next event.
func (k *keeper) fire(h *hold) {
	if h.check() != nil {
		return
	}
	now := time.Now()
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if h.keepAlive && !h.refreshing && !h.releasing && !h.nextRefresh.After(now) {
		h.refreshing = true
		// A refresh that returns after the deadline is useless: the lease
		// is reported lost then anyway. end cancels it (a loss signal, a
		// release, Close), so that it never outlives the hold.
		if h.deadline.IsZero() {
			ctx, cancel = context.WithCancel(context.Background())
		} else {
			ctx, cancel = context.WithDeadline(context.Background(), h.deadline)
		}
		h.cancelRefresh = cancel
	}
	h.mu.Unlock()
	if cancel != nil {
		k.l.wg.Add(1) // the tick is counted: Close's Wait cannot have returned
		go k.refresh(h, ctx, cancel)
	}
	k.reschedule(h)
}

// refresh is one keep-alive refresh of h, in its own goroutine. A transient
// failure is retried after max(TTL/12, 1ms) until the deadline ends the
// hold; ErrNotHeld has ended it already.
func (k *keeper) refresh(h *hold, ctx context.Context, cancel context.CancelFunc) {
	defer k.l.wg.Done()
	err := h.refreshWith(ctx)
	cancel()
	now := time.Now()
	h.mu.Lock()
	h.refreshing = false
	h.cancelRefresh = nil
	if h.err != nil || h.releasing || errors.Is(err, ErrNotHeld) {
		h.mu.Unlock()
		return
	}
	interval := h.ttl / 3
	if err != nil {
		interval = max(interval/4, time.Millisecond)
	}
	h.nextRefresh = now.Add(interval)
	h.mu.Unlock()
	k.reschedule(h)
}

// holdQueue is a min-heap of holds by their next event (container/heap).
type holdQueue []*hold

func (q holdQueue) Len() int           { return len(q) }
func (q holdQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q holdQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}

func (q *holdQueue) Push(x any) {
	h := x.(*hold)
	h.index = len(*q)
	*q = append(*q, h)
}

func (q *holdQueue) Pop() any {
	old := *q
	n := len(old) - 1
	h := old[n]
	old[n] = nil
	h.index = -1
	*q = old[:n]
	return h
}
