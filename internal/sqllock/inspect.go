package sqllock

import (
	"context"

	"github.com/dlock-go/dlock/driver"
)

var _ driver.Inspector = (*Locker)(nil)

// Inspect reports what the server can tell about name without taking it
// (dlock status): the dialect's Inspect reads the holder's session (a
// row lock's transaction, an advisory lock, GET_LOCK), what the holder
// recorded at its grant, and the sessions queued behind it. Facts the
// dialect cannot read for the strategy are left unknown.
func (l *Locker) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := l.ensure(ctx); err != nil {
		return driver.Info{}, ctxErr(ctx, err)
	}
	var (
		held               bool
		owner              *string
		fence, rem, queued *int64
	)
	found, err := l.pool.Run(ctx, l.d.Inspect(l.strategy, l.t, Req{Name: name}), &held, &owner, &fence, &rem, &queued)
	if err != nil {
		return driver.Info{}, ctxErr(ctx, l.errorf("inspect %q: %w", name, err))
	}
	info := driver.Info{Held: found && held, Waiters: -1}
	if !found {
		return info, nil
	}
	if owner != nil && info.Held {
		info.Owner = *owner
	}
	if fence != nil && *fence > 0 {
		info.Fence = uint64(*fence)
	}
	if rem != nil && info.Held {
		info.TTL = FromMicros(*rem)
	}
	if queued != nil {
		info.Waiters = int(*queued)
	}
	return info, nil
}
