package zookeeper

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// result is the outcome of one go-zookeeper call.
type result[T any] struct {
	v   T
	err error
}

// call runs f, a blocking go-zookeeper call (they take no context), and
// returns its result, or ctx's error as soon as ctx ends; f then finishes in
// the background and its result is dropped. Callers that must know what a
// write did use their own channel.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	return callUntil(ctx, nil, f)
}

// errStopped is callUntil's error when stop closed first.
var errStopped = errors.New("zookeeper: stopped")

// callUntil is call that also returns (errStopped) as soon as stop closes:
// a lease's request queued on a broken connection must not outlive the
// lease. It costs the one goroutine call needs, no second one.
func callUntil[T any](ctx context.Context, stop <-chan struct{}, f func() (T, error)) (T, error) {
	var zero T
	if ctx.Done() == nil && stop == nil {
		return f()
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	ch := make(chan result[T], 1)
	go func() {
		v, err := f()
		ch <- result[T]{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-stop:
		return zero, errStopped
	}
}

type nodeData struct {
	data []byte
	st   *zk.Stat
	ch   <-chan zk.Event
}

func getNode(ctx context.Context, c *zk.Conn, path string) ([]byte, *zk.Stat, error) {
	r, err := call(ctx, func() (nodeData, error) {
		d, st, err := c.Get(path)
		return nodeData{data: d, st: st}, err
	})
	return r.data, r.st, err
}

func getW(ctx context.Context, c *zk.Conn, path string) (nodeData, error) {
	return call(ctx, func() (nodeData, error) {
		d, st, ch, err := c.GetW(path)
		return nodeData{data: d, st: st, ch: ch}, err
	})
}

func children(ctx context.Context, c *zk.Conn, path string) ([]string, error) {
	return call(ctx, func() ([]string, error) {
		k, _, err := c.Children(path)
		return k, err
	})
}

func deleteNode(ctx context.Context, c *zk.Conn, path string) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, c.Delete(path, -1) })
	return err
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff spaces the retries of a request that failed transiently: 10ms,
// doubling up to 1s.
type backoff struct{ next time.Duration }

// pause waits the next pause, or until ctx ends.
func (b *backoff) pause(ctx context.Context) error {
	if b.next == 0 {
		b.next = 10 * time.Millisecond
	}
	err := sleepCtx(ctx, b.next)
	b.next = min(2*b.next, time.Second)
	return err
}

// retryable reports errors after which a request was certainly not applied
// and may simply be sent again (after a pause).
func retryable(err error) bool {
	return errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// getWAll sends getData-with-watch for every path at once (pipelined) and
// returns the results in order; the error is ctx's.
func getWAll(ctx context.Context, c *zk.Conn, paths []string) ([]result[nodeData], error) {
	out := make([]result[nodeData], len(paths))
	if len(paths) == 0 {
		return out, nil
	}
	done := make(chan struct{}, len(paths))
	for i, p := range paths {
		go func() {
			d, st, ch, err := c.GetW(p)
			out[i] = result[nodeData]{nodeData{data: d, st: st, ch: ch}, err}
			done <- struct{}{}
		}()
	}
	for range paths {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}
