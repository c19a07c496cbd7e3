package sqllock

import (
	"context"
	"sync/atomic"
	"time"
)

// CountStatements makes l's pool count the statements it runs, and
// returns the count. Call it before l is used.
func (l *Locker) CountStatements() *atomic.Int64 {
	p := &countingPool{Pool: l.pool}
	l.pool = p
	return &p.n
}

type countingPool struct {
	Pool
	n atomic.Int64
}

func (p *countingPool) Run(ctx context.Context, stmts []Stmt, dest ...any) (bool, error) {
	p.n.Add(int64(len(stmts)))
	return p.Pool.Run(ctx, stmts, dest...)
}

// SetRefreshWindow makes l's refresh batches wait d for others to join
// (a loaded machine may start a test's refreshes further apart than the
// TTL's 200th). Call it before l is used.
func (l *Locker) SetRefreshWindow(d time.Duration) {
	if l.refresher != nil {
		l.refresher.window = d
	}
}

// BatchRefreshes turns l's refresh batches off (each refresh its own
// statement, as before batching) or back on. Call it while no refresh is
// in flight.
func (l *Locker) BatchRefreshes(on bool) {
	if b, ok := l.d.(VersionBatcher); ok && on && l.strategy == Version {
		l.refresher = newRefresher(l, b)
		return
	}
	l.refresher = nil
}

// SetListenerLinger makes l's listener close after d unused (instead of
// listenerLinger), counted from now if it is unused now.
func (l *Locker) SetListenerLinger(d time.Duration) {
	if h := l.hub; h != nil {
		h.mu.Lock()
		h.linger = d
		h.usedLocked()
		h.mu.Unlock()
	}
}

// GrantChannel is the channel l's listener LISTENs on last ("" with no
// grant channel): the statement pg_stat_activity shows for it.
func (l *Locker) GrantChannel() string {
	if l.hub == nil {
		return ""
	}
	return l.hub.grantChannel
}
