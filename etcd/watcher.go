package etcd

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// watcher watches predecessors' deletes for a Locker's waiters over one
// Watch stream of its own, as renewer renews leases over one keep-alive
// stream. The client's Watch hands every response through two goroutines
// of its own (the stream's and the watch's) before the waiter's: on a
// handoff, the delete that ends a wait is on the critical path, and each
// hop is a wake-up the scheduler of a busy machine delays. Here the
// stream's reader hands it to the waiter directly. The server answers the
// creations of one stream in order, so the watches being created are a
// FIFO queue; it sends a watch's events only after its creation's answer.
type watcher struct {
	l *locker

	mu       sync.Mutex
	stream   pb.Watch_WatchClient
	cancel   context.CancelFunc
	creating []*deleteWatch         // sent, their creation not answered yet
	active   map[int64]*deleteWatch // by watch id
}

// deleteWatch is one watch of a key's delete. notes receives, in order,
// the revision after which the server sees every event (its answer to the
// creation), then the revision of the key's delete (of the key created at
// createRev or later), or a 0 when the watch broke (the stream broke, the
// server cancelled it, no leader); nothing after a delete or a 0.
type deleteWatch struct {
	createRev int64
	notes     chan int64 // capacity 2: the reader never blocks
	id        int64      // once created
	stopped   bool       // stop was called before the creation's answer
	done      bool       // a delete or a 0 was sent
}

// watchDelete starts watching key, created at createRev, for its delete
// from the current revision on (see waitDelete). The stream requires a
// leader: a member cut off from the others breaks it at once.
func (w *watcher) watchDelete(key string, createRev int64) (*deleteWatch, error) {
	dw := &deleteWatch{createRev: createRev, notes: make(chan int64, 2)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stream == nil {
		// The stream, with its reader in a goroutine that Close waits for.
		st, cancel, err := openStream(w.l, "watch", func(ctx context.Context) (pb.Watch_WatchClient, error) {
			return pb.NewWatchClient(w.l.cli.ActiveConnection()).Watch(ctx)
		}, w.read)
		if err != nil {
			return nil, err
		}
		w.stream, w.cancel, w.active = st, cancel, make(map[int64]*deleteWatch)
	}
	st := w.stream
	w.creating = append(w.creating, dw)
	req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(key), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT},
	}}}
	if err := st.Send(req); err != nil {
		w.breakLocked(st)
	}
	return dw, nil
}

// stop ends dw: the server is told to cancel it (once created).
func (w *watcher) stop(dw *deleteWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	dw.done = true
	if w.stream == nil {
		return
	}
	if w.active[dw.id] != dw {
		dw.stopped = true // cancelled when its creation is answered, if ever
		return
	}
	delete(w.active, dw.id)
	w.sendCancelLocked(dw.id)
}

func (w *watcher) sendCancelLocked(id int64) {
	req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}
	if err := w.stream.Send(req); err != nil {
		w.breakLocked(w.stream)
	}
}

// read delivers the stream's answers until it breaks.
func (w *watcher) read(st pb.Watch_WatchClient) {
	for {
		resp, err := st.Recv()
		w.mu.Lock()
		current := w.stream == st // else replaced after it broke
		switch {
		case current && err != nil:
			w.breakLocked(st)
		case current:
			w.deliverLocked(resp)
		}
		w.mu.Unlock()
		if !current || err != nil {
			return
		}
	}
}

// deliverLocked hands one answer of the server to its watch.
func (w *watcher) deliverLocked(resp *pb.WatchResponse) {
	if resp.Created {
		if len(w.creating) == 0 {
			w.breakLocked(w.stream) // an answer to no creation of ours
			return
		}
		dw := w.creating[0]
		w.creating[0] = nil
		w.creating = w.creating[1:]
		switch {
		case resp.Canceled || resp.WatchId < 0:
			w.note(dw, 0)
		case dw.stopped:
			w.sendCancelLocked(resp.WatchId)
		default:
			dw.id = resp.WatchId
			w.active[dw.id] = dw
			dw.notes <- resp.Header.Revision
		}
		return
	}
	dw := w.active[resp.WatchId]
	if dw == nil {
		return // a watch stopped since
	}
	if resp.Canceled {
		delete(w.active, resp.WatchId)
		w.note(dw, 0)
		return
	}
	for _, ev := range resp.Events {
		// (A delete before createRev is of an earlier key of the same
		// name: a spare etcd lease's.)
		if ev.Type == mvccpb.DELETE && ev.Kv.ModRevision > dw.createRev {
			w.note(dw, ev.Kv.ModRevision)
			return
		}
	}
}

// note sends dw its last note: a delete's revision, or 0.
func (w *watcher) note(dw *deleteWatch, rev int64) {
	if !dw.done {
		dw.done = true
		dw.notes <- rev
	}
}

// breakLocked ends st, breaking every watch on it; the next watch opens a
// new stream.
func (w *watcher) breakLocked(st pb.Watch_WatchClient) {
	if w.stream != st {
		return
	}
	w.cancel()
	w.stream, w.cancel = nil, nil
	for _, dw := range w.creating {
		w.note(dw, 0)
	}
	for _, dw := range w.active {
		w.note(dw, 0)
	}
	w.creating, w.active = nil, nil
}
