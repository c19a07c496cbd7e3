package sqllock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/batch"
)

// VersionBatcher is implemented by dialects that can refresh many Version
// leases in one statement.
type VersionBatcher interface {
	// VersionRefreshBatch extends each lease of rs (their Name and Token;
	// every one's TTL is ttl) whose row still holds it (name AND fence
	// match, not expired), each new expiry the server's clock when the
	// statement runs plus ttl; it never touches another row. Its answer
	// is one value, an int64: how many leases it extended.
	VersionRefreshBatch(t Table, ttl time.Duration, rs []Req) []Stmt
}

// refresher batches the refreshes of a Locker's Version leases (locks,
// not semaphores' permits): one lease's refresh is its own UPDATE and
// round trip, and 1 000 leases held by one Locker, each refreshed every
// third of its TTL, cost the client more in statements and goroutine
// wakes than in work. The refreshes that come within batch.Window of the
// first go together in one statement (VersionBatcher), at most
// maxRefreshBatch of them; when it extends every one of its leases, it
// answers them all. When it extends fewer (a lease was lost, expired or
// released), each half is sent again until the lost ones stand alone, so
// only they fail, with ErrNotHeld.
//
// Safety is unchanged: a lease's new expiry is the server's now when the
// batch's statement runs, which is after its caller started the refresh
// (the portable layer measures its deadline from that start), and the
// statement matches each row by name AND token, unexpired: it extends no
// lease that is not its own, and none released before it runs. What a
// batch costs is the wait for it: a refresh answers up to batch.Window
// later.
type refresher struct {
	l *Locker
	b VersionBatcher

	batch batch.Batcher[*refreshCall] // Send: f.sendBatch
	// window, when set, replaces batch.Window (tests).
	window time.Duration
}

// newRefresher returns l's refresher over b.
func newRefresher(l *Locker, b VersionBatcher) *refresher {
	f := &refresher{l: l, b: b}
	f.batch = batch.Batcher[*refreshCall]{Max: maxRefreshBatch, Send: f.sendBatch}
	return f
}

// refreshCall is one lease's refresh in a batch, and its outcome.
type refreshCall struct {
	r     Req
	ttl   time.Duration
	done  chan struct{}
	found bool  // the lease was extended
	err   error // the statement failed
}

// maxRefreshBatch is the most leases one statement refreshes.
const maxRefreshBatch = 256

// refresh extends r's lease by ttl in the next batch: whether it was
// still held, or the statement's error, or ctx's.
func (f *refresher) refresh(ctx context.Context, r Req, ttl time.Duration) (bool, error) {
	c := &refreshCall{r: r, ttl: ttl, done: make(chan struct{})}
	w := batch.Window(ttl)
	if f.window > 0 {
		w = f.window
	}
	f.batch.Add(c, w)
	select {
	case <-c.done:
		return c.found, c.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// sendBatch sends a batch in the background (Close waits for it), one
// statement per TTL among its calls (a statement has one TTL).
func (f *refresher) sendBatch(calls []*refreshCall) {
	for len(calls) > 0 {
		ttl := calls[0].ttl
		var same, rest []*refreshCall
		for _, c := range calls {
			if c.ttl == ttl {
				same = append(same, c)
			} else {
				rest = append(rest, c)
			}
		}
		calls = rest
		f.l.goCleanup(func() {
			// A refresh later than the TTL is of no use: the statement's
			// context ends then (a caller that gives up earlier returns
			// on its own).
			ctx, cancel := context.WithTimeout(context.Background(), ttl)
			defer cancel()
			f.send(ctx, ttl, same)
		})
	}
}

// send refreshes calls in one statement and answers each; when the
// statement extended fewer leases than calls, it sends each half again.
func (f *refresher) send(ctx context.Context, ttl time.Duration, calls []*refreshCall) {
	rs := make([]Req, len(calls))
	for i, c := range calls {
		rs[i] = c.r
	}
	var n int64
	_, err := f.l.pool.Run(ctx, f.b.VersionRefreshBatch(f.l.t, ttl, rs), &n)
	if err == nil && n < int64(len(calls)) && len(calls) > 1 {
		half := len(calls) / 2
		f.send(ctx, ttl, calls[:half])
		f.send(ctx, ttl, calls[half:])
		return
	}
	for _, c := range calls {
		c.found, c.err = err == nil && n > 0, err
		close(c.done)
	}
}
