package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// renewer renews etcd leases on demand over one LeaseKeepAlive stream per
// Locker. The client's KeepAliveOnce opens a stream for every renewal (a
// new HTTP/2 stream, its headers and its end each time), which on an
// acquisition's path cost a sixth of the whole; the client's KeepAlive
// renews on its own schedule, not when asked. The server answers the
// requests of one stream in order, one response each, so the pending
// renewals are a FIFO queue.
type renewer struct {
	l *locker

	mu      sync.Mutex
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	pending []pendingRenewal
}

type pendingRenewal struct {
	id clientv3.LeaseID
	ch chan renewResult
}

type renewResult struct {
	ttl int64
	err error
}

// errRenewStream: the stream broke before the answer came (a member
// restarting, a leader change); the renewal may or may not have happened.
var errRenewStream = errors.New("etcd: lease keep-alive stream broke")

// renew renews lease id now: the server holds it a whole TTL from when it
// handles the request. It returns the TTL the server granted, or
// rpctypes.ErrLeaseNotFound when the server no longer has the lease.
func (r *renewer) renew(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	return awaitRenewal(ctx, r.send(id)[0])
}

// send sends a renewal of each of ids, in one go on the stream (a batch of
// refreshes, refresh.go, goes out in one write), and returns the channels
// their answers come on, in order (awaitRenewal reads one).
func (r *renewer) send(ids ...clientv3.LeaseID) []chan renewResult {
	chs := make([]chan renewResult, len(ids))
	for i := range chs {
		chs[i] = make(chan renewResult, 1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stream == nil {
		if err := r.openLocked(); err != nil {
			for _, ch := range chs {
				ch <- renewResult{err: err}
			}
			return chs
		}
	}
	st := r.stream
	for i, id := range ids {
		r.pending = append(r.pending, pendingRenewal{id: id, ch: chs[i]})
		if err := st.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
			r.breakLocked(st, fmt.Errorf("%w: %w", errRenewStream, err))
			for _, ch := range chs[i+1:] {
				ch <- renewResult{err: err}
			}
			break
		}
	}
	return chs
}

// awaitRenewal waits for the answer on ch (from send): the TTL the server
// granted, or rpctypes.ErrLeaseNotFound when it no longer has the lease.
func awaitRenewal(ctx context.Context, ch chan renewResult) (int64, error) {
	select {
	case res := <-ch:
		if res.err == nil && res.ttl <= 0 {
			return 0, rpctypes.ErrLeaseNotFound
		}
		return res.ttl, res.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// openLocked opens the stream, with its reader in a goroutine that Close
// waits for. The stream requires a leader: a member cut off from the
// others fails it at once instead of answering for a lease it cannot
// renew.
func (r *renewer) openLocked() error {
	st, cancel, err := openStream(r.l, "lease keep-alive", func(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error) {
		return pb.NewLeaseClient(r.l.cli.ActiveConnection()).LeaseKeepAlive(ctx)
	}, r.read)
	if err != nil {
		return err
	}
	r.stream, r.cancel = st, cancel
	return nil
}

// openStream opens one of the Locker's own streams (the renewer's, the
// watcher's) with open, on a context that requires a leader and ends with
// the Locker, and runs read on it in a goroutine that Close waits for.
// what names the stream in an error.
func openStream[S any](l *locker, what string, open func(context.Context) (S, error), read func(S)) (S, context.CancelFunc, error) {
	var none S
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.closing))
	st, err := open(ctx)
	if err != nil {
		cancel()
		return none, nil, err
	}
	if !l.background(func() { read(st) }) {
		cancel()
		return none, nil, fmt.Errorf("etcd: %s: %w", what, errClosed)
	}
	return st, cancel, nil
}

// errClosed: the Locker closed.
var errClosed = errors.New("closed")

// read delivers the stream's answers in order until it breaks.
func (r *renewer) read(st pb.Lease_LeaseKeepAliveClient) {
	for {
		resp, err := st.Recv()
		r.mu.Lock()
		if r.stream != st {
			r.mu.Unlock()
			return
		}
		if err == nil && (len(r.pending) == 0 || r.pending[0].id != clientv3.LeaseID(resp.ID)) {
			err = fmt.Errorf("an answer for lease %x out of turn", resp.ID)
		}
		if err != nil {
			r.breakLocked(st, fmt.Errorf("%w: %w", errRenewStream, err))
			r.mu.Unlock()
			return
		}
		p := r.pending[0]
		r.pending[0] = pendingRenewal{}
		r.pending = r.pending[1:]
		r.mu.Unlock()
		p.ch <- renewResult{ttl: resp.TTL}
	}
}

// breakLocked ends st, failing every renewal waiting on it; the next
// renewal opens a new stream.
func (r *renewer) breakLocked(st pb.Lease_LeaseKeepAliveClient, err error) {
	if r.stream != st {
		return
	}
	r.cancel()
	r.stream, r.cancel = nil, nil
	for _, p := range r.pending {
		p.ch <- renewResult{err: err}
	}
	r.pending = nil
}
