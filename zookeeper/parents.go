package zookeeper

import "context"

// maxKnownParents bounds the parents a Locker remembers (its parents
// set, a knownset.Set): past it the set starts again empty (a forgotten
// parent costs one create that finds it).
//
// The set is the parent nodes a Locker has seen exist: it created them or
// a create under them succeeded. An attempt on a name whose parent is not
// known creates the parent first, where it used to send its own create
// first and learn from its failure (NoNode) that the parent was missing: a
// lock on a name never used before (orders/42, orders/43, …) then costs two
// round trips and two logged transactions, not three. A parent that the
// server deleted since (an empty container) still fails the create with
// NoNode, which creates it again.
const maxKnownParents = 1 << 14

// knownParent creates parent before a create under it when this Locker has
// not seen it yet (see maxKnownParents). It is a shortcut, not a step the
// attempt needs: when it fails (a connection lost, a session moving), the
// attempt's create goes ahead and handles the failure as it always has
// (retries, or NoNode and the parents again). Only ctx's end stops it.
func (l *locker) knownParent(ctx context.Context, parent string, container bool) error {
	if l.parents.Has(parent) {
		return nil
	}
	if err := l.ensureParents(ctx, parent, container); err != nil {
		return ctx.Err()
	}
	l.parents.Add(parent)
	return nil
}
