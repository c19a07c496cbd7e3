// Package background runs the clean-ups that a driver starts for a call
// that has already returned (taking back what a cancelled or failed request
// may have left on the server), so that the call can return when its
// context ends while the clean-up is never lost: the driver's Close waits
// for every one.
package background

import "sync"

// Group is the clean-ups of one driver. Its zero value is ready to use.
type Group struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

// Go runs f in the background and returns a channel closed when f has
// returned. Once Stop has been called it runs f at once, before returning
// (a WaitGroup must not grow while Wait waits on it).
func (g *Group) Go(f func()) <-chan struct{} {
	done := make(chan struct{})
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		defer close(done)
		f()
		return done
	}
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		defer close(done)
		f()
	}()
	return done
}

// Stop makes later calls of Go run their clean-up inline. Call it when the
// driver's Close begins, then Wait.
func (g *Group) Stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// Wait waits for every clean-up started in the background.
func (g *Group) Wait() { g.wg.Wait() }
