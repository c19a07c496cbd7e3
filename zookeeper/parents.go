package zookeeper

import (
	"context"
	"sync"
)

// maxKnownParents bounds the parents a Locker remembers: past it the set
// starts again empty (a forgotten parent costs one create that finds it).
const maxKnownParents = 1 << 14

// parentSet is the parent nodes a Locker has seen exist: it created them
// or a create under them succeeded. An attempt on a name whose parent is
// not known creates the parent first, where it used to send its own create
// first and learn from its failure (NoNode) that the parent was missing: a
// lock on a name never used before (orders/42, orders/43, …) then costs two
// round trips and two logged transactions, not three. A parent that the
// server deleted since (an empty container) still fails the create with
// NoNode, which creates it again.
type parentSet struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (p *parentSet) has(parent string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.m[parent]
	return ok
}

func (p *parentSet) add(parent string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || len(p.m) >= maxKnownParents {
		p.m = make(map[string]struct{})
	}
	p.m[parent] = struct{}{}
}

// knownParent creates parent before a create under it when this Locker has
// not seen it yet (see parentSet). It is a shortcut, not a step the
// attempt needs: when it fails (a connection lost, a session moving), the
// attempt's create goes ahead and handles the failure as it always has
// (retries, or NoNode and the parents again). Only ctx's end stops it.
func (l *locker) knownParent(ctx context.Context, parent string, container bool) error {
	if l.parents.has(parent) {
		return nil
	}
	if err := l.ensureParents(ctx, parent, container); err != nil {
		return ctx.Err()
	}
	l.parents.add(parent)
	return nil
}
