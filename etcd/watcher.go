package etcd

import (
	"context"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
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
//
// A wait that knows every key ahead of it (see attempt.wait) watches on a
// watch of its whole queue that the Locker keeps for keepQueueWatch after
// its last wait ends, and that the next wait on that queue takes up
// without a round trip: etcd (3.4) reads the current revision, then
// registers a watch from the next; a write applied in between leaves the
// watch "unsynced", and the server sends its events only at its next
// catch-up of such watches, every 100ms. A handoff that created a watch
// per wait met that whenever a creation raced a write (5 grants in 1 000
// in BenchmarkHandoffStalls, each waiting 0-100ms for its event).
type watcher struct {
	l *locker

	mu       sync.Mutex
	stream   pb.Watch_WatchClient
	cancel   context.CancelFunc
	creating []*serverWatch         // sent, their creation not answered yet
	active   map[int64]*serverWatch // by watch id
	queues   map[string]*serverWatch
}

// keepQueueWatch is how long a queue's watch is kept after its last wait.
const keepQueueWatch = time.Second

// keepDeletes is how many of its latest deletes a queue's watch keeps, for
// a wait that takes it up after they were delivered.
const keepDeletes = 16

// serverWatch is one watch on the server and the waits it serves.
type serverWatch struct {
	queue string         // a kept queue's watch; "" for one wait's own
	waits []*deleteWatch // the waits on it
	id    int64          // once created
	// created: its creation was answered; stopped: a wait's own watch,
	// stopped before that answer.
	created, stopped bool
	// A queue's watch: every delete of the queue after floor is in
	// deletes (the newest keepDeletes) or still to come; last is the
	// revision of the newest event delivered. idle cancels it once no wait
	// has taken it up for keepQueueWatch.
	floor, last int64
	deletes     []*mvccpb.Event
	idle        *time.Timer
}

// deleteWatch is one wait's watch of the deletes of a set of keys, each of
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
	sw    *serverWatch
	done  bool // a last note was sent
}

// watchDelete starts watching the keys of set for their deletes after
// revision base, from the current revision on (see waitDelete), on one
// watch of the range [from, end) that covers them (the other keys'
// deletes in it are passed over). The stream requires a leader: a member
// cut off from the others breaks it at once.
func (w *watcher) watchDelete(from, end string, set map[string]bool, base int64) (*deleteWatch, error) {
	dw := &deleteWatch{set: set, base: base, notes: make(chan int64, 2)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.openLocked(); err != nil {
		return nil, err
	}
	sw := &serverWatch{waits: []*deleteWatch{dw}}
	dw.sw = sw
	w.createLocked(sw, from, end)
	return dw, nil
}

// watchQueue is watchDelete on the kept watch of the whole queue, and
// watches own too (the waiter's key, see deleteWatch): one
// created if there is none, or the kept one, whose creation note is then
// base when its kept deletes cover every revision after base (those after
// base are passed on at once), else the newest revision it delivered.
func (w *watcher) watchQueue(queue string, set map[string]bool, own string, base int64) (*deleteWatch, error) {
	dw := &deleteWatch{set: set, own: own, base: base, notes: make(chan int64, 2)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.openLocked(); err != nil {
		return nil, err
	}
	sw := w.queues[queue]
	if sw == nil {
		sw = &serverWatch{queue: queue}
		w.queues[queue] = sw
		w.createLocked(sw, queue, clientv3.GetPrefixRangeEnd(queue))
		if w.stream == nil {
			dw.sw = sw
			w.note(dw, 0) // the send broke the stream
			return dw, nil
		}
	}
	if sw.idle != nil {
		sw.idle.Stop()
		sw.idle = nil
	}
	dw.sw = sw
	sw.waits = append(sw.waits, dw)
	if sw.created {
		if sw.floor <= base {
			dw.notes <- base
			w.applyLocked(dw, sw.deletes)
		} else {
			dw.notes <- sw.last
		}
	}
	return dw, nil
}

// dropQueue cancels queue's kept watch unless a wait is on it: a wait that
// watches only its predecessor (a long queue) does not keep every delete
// of the queue coming.
func (w *watcher) dropQueue(queue string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sw := w.queues[queue]; sw != nil && sw.created && len(sw.waits) == 0 {
		w.endQueueLocked(sw)
	}
}

// openLocked opens the stream, with its reader in a goroutine that Close
// waits for, unless it is open.
func (w *watcher) openLocked() error {
	if w.stream != nil {
		return nil
	}
	st, cancel, err := openStream(w.l, "watch", func(ctx context.Context) (pb.Watch_WatchClient, error) {
		return pb.NewWatchClient(w.l.cli.ActiveConnection()).Watch(ctx)
	}, w.read)
	if err != nil {
		return err
	}
	w.stream, w.cancel = st, cancel
	w.active, w.queues = make(map[int64]*serverWatch), make(map[string]*serverWatch)
	return nil
}

// createLocked sends sw's creation, a watch of the deletes in [from, end)
// from the current revision.
func (w *watcher) createLocked(sw *serverWatch, from, end string) {
	w.creating = append(w.creating, sw)
	req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(from), RangeEnd: []byte(end), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT},
	}}}
	if err := w.stream.Send(req); err != nil {
		w.breakLocked(w.stream)
	}
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

// stop ends dw: a wait's own watch is cancelled on the server (once
// created); a queue's watch is kept for keepQueueWatch once no wait is on
// it.
func (w *watcher) stop(dw *deleteWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	dw.done = true
	sw := dw.sw
	if i := slices.Index(sw.waits, dw); i >= 0 {
		sw.waits = slices.Delete(sw.waits, i, i+1)
	}
	if w.stream == nil || len(sw.waits) > 0 {
		return
	}
	switch {
	case sw.queue != "":
		if w.queues[sw.queue] == sw && sw.created {
			w.idleLocked(sw)
		}
	case w.active[sw.id] != sw:
		sw.stopped = true // cancelled when its creation is answered, if ever
	default:
		delete(w.active, sw.id)
		w.sendCancelLocked(sw.id)
	}
}

// idleLocked arms the end of a queue's watch that no wait is on.
func (w *watcher) idleLocked(sw *serverWatch) {
	sw.idle = time.AfterFunc(keepQueueWatch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.queues[sw.queue] == sw && len(sw.waits) == 0 {
			w.endQueueLocked(sw)
		}
	})
}

// endQueueLocked cancels a created queue's watch.
func (w *watcher) endQueueLocked(sw *serverWatch) {
	if sw.idle != nil {
		sw.idle.Stop()
		sw.idle = nil
	}
	delete(w.queues, sw.queue)
	delete(w.active, sw.id)
	w.sendCancelLocked(sw.id)
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
		sw := w.creating[0]
		w.creating[0] = nil
		w.creating = w.creating[1:]
		switch {
		case resp.Canceled || resp.WatchId < 0:
			if w.queues[sw.queue] == sw {
				delete(w.queues, sw.queue)
			}
			w.noteAll(sw, 0)
		case sw.stopped:
			w.sendCancelLocked(resp.WatchId)
		default:
			sw.id, sw.created = resp.WatchId, true
			sw.floor, sw.last = resp.Header.Revision, resp.Header.Revision
			w.active[sw.id] = sw
			for _, dw := range sw.waits {
				dw.notes <- resp.Header.Revision
			}
			if sw.queue != "" && len(sw.waits) == 0 {
				w.idleLocked(sw)
			}
		}
		return
	}
	sw := w.active[resp.WatchId]
	if sw == nil {
		return // a watch stopped since
	}
	if resp.Canceled {
		delete(w.active, resp.WatchId)
		if w.queues[sw.queue] == sw {
			delete(w.queues, sw.queue)
		}
		w.noteAll(sw, 0)
		return
	}
	if sw.queue != "" {
		for _, ev := range resp.Events {
			sw.last = max(sw.last, ev.Kv.ModRevision)
			if ev.Type != mvccpb.DELETE {
				continue
			}
			if len(sw.deletes) == keepDeletes {
				sw.floor = sw.deletes[0].Kv.ModRevision
				sw.deletes = append(sw.deletes[:0], sw.deletes[1:]...)
			}
			sw.deletes = append(sw.deletes, ev)
		}
	}
	for _, dw := range slices.Clone(sw.waits) {
		w.applyLocked(dw, resp.Events)
	}
}

// applyLocked passes the events of one answer (or a queue watch's kept
// deletes) to dw.
func (w *watcher) applyLocked(dw *deleteWatch, evs []*mvccpb.Event) {
	emptied := int64(0)
	for _, ev := range evs {
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

// noteAll sends every wait on sw the last note rev.
func (w *watcher) noteAll(sw *serverWatch, rev int64) {
	for _, dw := range sw.waits {
		w.note(dw, rev)
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
	for _, sw := range w.creating {
		w.noteAll(sw, 0)
	}
	for _, sw := range w.active {
		w.noteAll(sw, 0)
	}
	for _, sw := range w.queues {
		if sw.idle != nil {
			sw.idle.Stop()
		}
	}
	w.creating, w.active, w.queues = nil, nil, nil
}
