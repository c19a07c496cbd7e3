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

// deleteWatch is one watch of the deletes of a set of keys, each of
// whose instances was there at revision base (a delete at base or before
// is of an earlier instance of the same name: a spare etcd lease's key),
// and of the waiter's own key, if own is set. notes receives, in order,
// the revision after which the server sees every event (its answer to the
// creation), then one of: the revision of the delete that left none of
// the set (see forget), -1 when own was deleted (in the same answer as
// the set's last delete, too), or 0 when the watch broke (the stream
// broke, the server cancelled it, no leader); nothing after those.
type deleteWatch struct {
	set   map[string]bool // the keys not seen deleted yet
	own   string
	base  int64
	notes chan int64 // capacity 2: the reader never blocks
	id    int64      // once created
	// stopped: stop was called before the creation's answer; done: a
	// last note was sent.
	stopped, done bool
}

// watchDelete starts watching the keys of set (and own, unless "") for
// their deletes after revision base, from the current revision on (see
// waitDelete), on one watch of the range [from, end) that covers them
// (the other keys' deletes in it are passed over). The stream requires a
// leader: a member cut off from the others breaks it at once.
func (w *watcher) watchDelete(from, end string, set map[string]bool, own string, base int64) (*deleteWatch, error) {
	dw := &deleteWatch{set: set, own: own, base: base, notes: make(chan int64, 2)}
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
		Key: []byte(from), RangeEnd: []byte(end), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT},
	}}}
	if err := st.Send(req); err != nil {
		w.breakLocked(st)
	}
	return dw, nil
}

// forget takes keys out of dw's set (a look found them gone at revision
// rev); the set left empty, dw's last note is rev.
func (w *watcher) forget(dw *deleteWatch, keys []string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		delete(dw.set, k)
	}
	if len(dw.set) == 0 {
		w.note(dw, rev)
	}
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
	emptied := int64(0)
	for _, ev := range resp.Events {
		if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision <= dw.base {
			continue
		}
		k := string(ev.Kv.Key)
		if dw.own != "" && k == dw.own {
			w.note(dw, -1)
			return
		}
		if dw.set[k] {
			delete(dw.set, k)
			if len(dw.set) == 0 {
				emptied = ev.Kv.ModRevision
			}
		}
	}
	if emptied > 0 {
		w.note(dw, emptied)
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
