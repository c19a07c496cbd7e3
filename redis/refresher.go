package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/batch"
)

// refresher gathers the keep-alive refreshes of a Locker's leases that
// come within batch.Window of the first into one pipeline per server (the
// single server, each of a Cluster's masters as go-redis routes a
// pipeline, each Redlock node): one lease's refresh is its own request,
// and 1 000 leases held by one Locker, each refreshed every third of its
// TTL, cost the client more in requests, their syscalls and goroutine
// wakes than in work (on Redlock, three of each per refresh).
//
// Safety is unchanged: each refresh is refresh.lua on its own key, which
// extends the key only while it holds the lease's value, from the
// server's time when it runs, after its caller started the refresh (the
// portable layer measures the deadline from that start); it never
// re-creates a key, so a refresh that runs after the lease's release
// extends nothing. What a batch costs is the wait for it: a refresh
// answers up to batch.Window later.
type refresher struct {
	nodes []goredis.UniversalClient
	// timeout bounds one node's pipeline (Redlock's node timeout); the
	// batch's shortest TTL bounds it anyway: a refresh later than the TTL
	// is of no use.
	timeout time.Duration
	batch   batch.Batcher[*refreshCall]

	mu     sync.Mutex
	closed bool           // close has begun: a batch is answered at once
	tasks  sync.WaitGroup // the batches sent (Add under mu, before closed)
	sent   atomic.Int64   // batches sent (tests)
}

// maxRefreshBatch is the most refreshes one pipeline carries.
const maxRefreshBatch = 256

func newRefresher(nodes []goredis.UniversalClient, timeout time.Duration) *refresher {
	f := &refresher{nodes: nodes, timeout: timeout}
	f.batch = batch.Batcher[*refreshCall]{Max: maxRefreshBatch, Send: f.send}
	return f
}

// refreshCall is one lease's refresh in a batch, and its outcome on each
// node.
type refreshCall struct {
	args []any // refresh.lua's EVALSHA
	ttl  time.Duration
	done chan struct{}
	out  []outcome // per node: ok (extended), not held (neither), or err
}

// refresh extends the lease of n held with value by ttl (ttlArg, the
// script's argument) in the next batch, and returns each node's outcome,
// or ctx's error when ctx ends first.
func (f *refresher) refresh(ctx context.Context, n *names, value, ttlArg any, ttl time.Duration) ([]outcome, error) {
	c := &refreshCall{ttl: ttl, done: make(chan struct{}), out: make([]outcome, len(f.nodes))}
	c.args = append(refreshScript.args(make([]any, 0, refreshArgc), "1"), n.lockArg, value, ttlArg)
	f.batch.Add(c, batch.Window(ttl))
	select {
	case <-c.done:
		return c.out, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send sends a batch in the background (close waits for it): one
// pipeline per node, in parallel.
func (f *refresher) send(calls []*refreshCall) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		for _, c := range calls {
			for i := range c.out {
				c.out[i] = outcome{err: goredis.ErrClosed}
			}
			close(c.done)
		}
		return
	}
	f.tasks.Add(1)
	f.mu.Unlock()
	f.sent.Add(1)
	go func() {
		defer f.tasks.Done()
		timeout := calls[0].ttl
		for _, c := range calls[1:] {
			timeout = min(timeout, c.ttl)
		}
		if f.timeout > 0 {
			timeout = min(timeout, f.timeout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var wg sync.WaitGroup
		for i, node := range f.nodes[1:] {
			wg.Go(func() { sendTo(ctx, i+1, node, calls) })
		}
		sendTo(ctx, 0, f.nodes[0], calls)
		wg.Wait()
		for _, c := range calls {
			close(c.done)
		}
	}()
}

// sendTo runs calls' refreshes on node i in one pipeline and records each
// one's outcome there. A refresh the server no longer has the script of
// (NOSCRIPT: restarted, SCRIPT FLUSH) runs again on its own, with EVAL.
func sendTo(ctx context.Context, i int, node goredis.UniversalClient, calls []*refreshCall) {
	cmds := make([]*goredis.Cmd, len(calls))
	// Each command carries its own error; Pipelined's is the first of them.
	_, _ = node.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for j, c := range calls {
			cmds[j] = p.Do(ctx, c.args...)
		}
		return nil
	})
	for j, c := range calls {
		cmd := cmds[j]
		if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			cmd = refreshScript.run(ctx, node, c.args)
		}
		r, err := cmd.Int64()
		switch {
		case err != nil:
			c.out[i] = outcome{err: err}
		case r == 1:
			c.out[i] = outcome{ok: true}
		default:
			c.out[i] = outcome{}
		}
	}
}

// close sends the waiting batch and waits for every batch sent; a batch
// sent later fails with goredis.ErrClosed.
func (f *refresher) close() {
	f.batch.Flush()
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.tasks.Wait()
}
