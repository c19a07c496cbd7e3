// Package batch gathers the calls that come within a short window of
// each other into one batch: the keep-alive refreshes of a Locker's
// leases, sent as one request instead of a request each (the etcd driver
// and internal/sqllock's version strategy use it).
package batch

import (
	"sync"
	"time"
)

// Batcher gathers items into batches. A batch is sent window after its
// first item came (Add's window), or at once by the item that fills it
// (Max), or by Flush. Set Max and Send before the first Add; a Batcher
// must not be copied after.
type Batcher[T any] struct {
	// Max is the most items a batch holds.
	Max int
	// Send sends a batch of at least one item. It is called without the
	// Batcher's lock held, from Add, Flush or the window's timer, and
	// should hand the work to the background: Add's caller waits for it.
	Send func(items []T)

	mu    sync.Mutex
	items []T
	timer *time.Timer // made by the first Add
	armed bool        // timer is armed for items
}

// Add adds item to the waiting batch; the batch's first item arms its
// window.
func (b *Batcher[T]) Add(item T, window time.Duration) {
	b.mu.Lock()
	b.items = append(b.items, item)
	var full []T
	switch {
	case len(b.items) >= b.Max:
		full = b.takeLocked()
	case !b.armed:
		b.armed = true
		if b.timer == nil {
			b.timer = time.AfterFunc(window, b.Flush)
		} else {
			b.timer.Reset(window)
		}
	}
	b.mu.Unlock()
	if len(full) > 0 {
		b.Send(full)
	}
}

// Flush sends the waiting batch now, if there is one.
func (b *Batcher[T]) Flush() {
	b.mu.Lock()
	items := b.takeLocked()
	b.mu.Unlock()
	if len(items) > 0 {
		b.Send(items)
	}
}

// takeLocked returns the waiting items and disarms the timer. b.mu is
// held. A timer that fired already and waits for the lock finds the next
// batch, if any, and sends it early: never later than its window.
func (b *Batcher[T]) takeLocked() []T {
	items := b.items
	b.items = nil
	if b.armed {
		b.armed = false
		b.timer.Stop()
	}
	return items
}

// Window is how long a keep-alive refresh of a lease of ttl waits for
// others to join its batch: a 200th of the TTL (a refresh comes every
// third), at most 20ms. The refresh answers that much later at most; the
// portable layer measures the lease's deadline from the refresh's start.
func Window(ttl time.Duration) time.Duration {
	return min(ttl/200, 20*time.Millisecond)
}
