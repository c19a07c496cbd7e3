package sqllock

import (
	"context"
	"sync"
)

// persister runs the dialect's Persist script for ForUpdate grants, one at
// a time, and lets one run serve every grant whose token was taken before
// it started (a commit writes the whole log up to its own record): under
// load, concurrent grants share a commit instead of queueing for one each.
type persister struct {
	run  func(ctx context.Context) error
	sem  chan struct{} // one run at a time
	mu   sync.Mutex
	runs uint64 // runs started
	done uint64 // the latest run that succeeded
}

func newPersister(run func(ctx context.Context) error) *persister {
	return &persister{run: run, sem: make(chan struct{}, 1)}
}

// persist returns once a run that started after the call has succeeded.
func (p *persister) persist(ctx context.Context) error {
	p.mu.Lock()
	need := p.runs + 1 // any run numbered need or later starts after now
	p.mu.Unlock()
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.sem }()
	p.mu.Lock()
	if p.done >= need {
		p.mu.Unlock()
		return nil
	}
	p.runs++
	n := p.runs
	p.mu.Unlock()
	if err := p.run(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	p.done = n
	p.mu.Unlock()
	return nil
}

// slotConn is a pinned connection that frees its slot (see Locker.pin)
// when it is released.
type slotConn struct {
	Conn
	slots chan struct{}
}

func (c *slotConn) Release(discard bool) {
	c.Conn.Release(discard)
	<-c.slots
}

// pin takes a connection out of the pool for a pinned strategy. ForUpdate
// on a bounded pool pins at most all but one of its connections, so that
// Persist always finds one: otherwise leases granted at once on every
// connection would each wait for a connection to persist their tokens.
func (l *Locker) pin(ctx context.Context) (Conn, error) {
	if l.slots == nil {
		return l.pool.Pin(ctx)
	}
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c, err := l.pool.Pin(ctx)
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, slots: l.slots}, nil
}
