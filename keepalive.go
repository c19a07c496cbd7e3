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
// goroutine, started by the first hold and stopped by Close, that fires
// them. A lease costs a heap entry, not a goroutine and two timers.
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
	armed   time.Time // when the goroutine's timer fires; zero: not armed
	started bool
	stopped bool
	wake    chan struct{} // capacity 1: the head moved earlier than armed
	stop    chan struct{} // closed by Close
}

func (k *keeper) init(l *Locker) {
	k.l = l
	k.wake = make(chan struct{}, 1)
	k.stop = make(chan struct{})
}

// start adds a new hold. l.mu is held and l is not closed, so the
// goroutine started here is one Close waits for.
func (k *keeper) start(h *hold) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.started && !k.stopped {
		k.started = true
		k.l.wg.Add(1)
		go k.run()
	}
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
		k.armed = at
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// remove takes an ended hold out of the heap for good.
func (k *keeper) remove(h *hold) {
	k.mu.Lock()
	h.unscheduled = true
	if h.index >= 0 {
		heap.Remove(&k.q, h.index)
	}
	k.mu.Unlock()
}

// close stops the goroutine (Close has ended every hold).
func (k *keeper) close() {
	k.mu.Lock()
	k.stopped = true
	if k.started {
		close(k.stop)
	}
	k.mu.Unlock()
}

// run fires every hold whose event is due, then sleeps until the next.
func (k *keeper) run() {
	defer k.l.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	var due []*hold
	for {
		k.mu.Lock()
		now := time.Now()
		for len(k.q) > 0 && !k.q[0].at.After(now) {
			due = append(due, heap.Pop(&k.q).(*hold))
		}
		k.armed = time.Time{}
		if len(due) == 0 && len(k.q) > 0 {
			k.armed = k.q[0].at
		}
		armed := k.armed
		k.mu.Unlock()
		if len(due) > 0 {
			for i, h := range due {
				k.fire(h)
				due[i] = nil
			}
			due = due[:0]
			continue
		}
		if !armed.IsZero() {
			t.Reset(armed.Sub(now))
		}
		select {
		case <-t.C:
		case <-k.wake:
			t.Stop()
		case <-k.stop:
			return
		}
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
		k.l.wg.Add(1) // k.run is counted: Close's Wait cannot have returned
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
