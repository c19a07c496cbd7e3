package sqllock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// hub multiplexes the waiters of one Locker over one listening
// connection. It LISTENs on two channels: the table's, whose payload is
// the name of a semaphore whose permit was freed (SemWakeKey), and, for a
// Locker whose version waiters queue (VersionQueuer), the Locker's own
// grant channel, whose payload "<nonce> <token>" is a grant that a
// release made to the queued waiter of that nonce.
type hub struct {
	n       Notifier
	channel string
	// grantChannel is this Locker's grant channel ("": none).
	grantChannel string

	startMu sync.Mutex // held while the listener starts

	mu sync.Mutex
	// linger is how long the listener stays open while no waiter uses
	// it (listenerLinger).
	linger  time.Duration
	subs    map[string]map[chan struct{}]struct{}
	grants  map[int64]chan int64
	running bool
	closed  bool
	cancel  context.CancelFunc
	// gen numbers the listeners: a listener that ends (failed, or closed
	// for idleness) ends its own waiters only, not a newer listener's.
	gen   uint64
	idle  *time.Timer    // closes the listener after linger unused
	loops sync.WaitGroup // the listeners' goroutines
}

// listenerLinger is how long a hub keeps its listening connection open
// with no waiter: PostgreSQL (up to 18) wakes every backend that LISTENs
// in the database, on any channel, at every NOTIFY's commit, so a Locker
// that keeps listening while none of its waiters waits makes every other
// Locker's grants and permit releases cost the server a process wake-up
// more (BenchmarkNotifyListeners). A wait after that starts a listener
// again: a queued waiter renews once when it is up, which takes a grant
// made meanwhile.
const listenerLinger = 30 * time.Second

func newHub(n Notifier, channel string) *hub {
	return &hub{n: n, channel: channel, linger: listenerLinger, subs: make(map[string]map[chan struct{}]struct{}), grants: make(map[int64]chan int64)}
}

// usedLocked re-arms or stops the idle timer after a change of the
// listener's users; h.mu is held.
func (h *hub) usedLocked() {
	if len(h.subs) > 0 || len(h.grants) > 0 || !h.running || h.closed {
		if h.idle != nil {
			h.idle.Stop()
		}
		return
	}
	if h.idle == nil {
		h.idle = time.AfterFunc(h.linger, h.quiet)
		return
	}
	h.idle.Reset(h.linger)
}

// quiet closes the listener if it is still unused.
func (h *hub) quiet() {
	h.mu.Lock()
	if len(h.subs) > 0 || len(h.grants) > 0 || !h.running || h.closed {
		h.mu.Unlock()
		return
	}
	h.running = false // the next waiter starts another
	cancel := h.cancel
	h.mu.Unlock()
	cancel()
}

// watch registers a waiter of name. The LISTEN is active before it
// returns, so a release after it is seen.
func (h *hub) watch(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := h.start(ctx); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if !h.running {
		h.mu.Unlock()
		close(ch) // the listener died just now: the waiter polls
		return ch, func() {}, nil
	}
	set := h.subs[name]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.subs[name] = set
	}
	set[ch] = struct{}{}
	h.usedLocked()
	h.mu.Unlock()
	stop := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if set := h.subs[name]; set != nil {
			delete(set, ch)
			if len(set) == 0 {
				delete(h.subs, name)
			}
		}
		h.usedLocked()
	}
	return ch, stop, nil
}

// awaitGrant registers the queued waiter nonce while the listener runs:
// the channel receives the token of a grant made to it, and is closed if
// the listener dies (a grant may then be missed: the waiter's renewal
// finds it). It returns nil when the listener is not running.
func (h *hub) awaitGrant(nonce int64) <-chan int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running {
		return nil
	}
	ch := make(chan int64, 1)
	h.grants[nonce] = ch
	h.usedLocked()
	return ch
}

// endGrant unregisters nonce (its waiter got the lease or gave up; a
// grant arriving later is taken back by the waiter's clean-up).
func (h *hub) endGrant(nonce int64) {
	h.mu.Lock()
	delete(h.grants, nonce)
	h.usedLocked()
	h.mu.Unlock()
}

// start opens the listening connection unless it runs.
func (h *hub) start(ctx context.Context) error {
	h.startMu.Lock()
	defer h.startMu.Unlock()
	h.mu.Lock()
	running, closed := h.running, h.closed
	h.mu.Unlock()
	if running {
		return nil
	}
	if closed {
		return context.Canceled
	}
	channels := []string{h.channel}
	if h.grantChannel != "" {
		channels = append(channels, h.grantChannel)
	}
	lis, err := h.n.Listen(ctx, channels...)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.Background())
	h.mu.Lock()
	h.gen++
	h.running, h.cancel = true, cancel
	h.loops.Add(1)
	go h.loop(lctx, cancel, lis, h.gen)
	h.usedLocked() // unused until a waiter comes
	h.mu.Unlock()
	return nil
}

// loop delivers notifications until the listener fails or is closed.
func (h *hub) loop(ctx context.Context, cancel context.CancelFunc, lis Listening, gen uint64) {
	defer h.loops.Done()
	defer cancel()
	defer lis.Close()
	for {
		channel, payload, err := lis.Next(ctx)
		if err != nil {
			// Wake every waiter for good: they fall back to polling (a
			// queued waiter renews at once), and the next wait starts a
			// new listener. A listener closed for idleness (quiet) has
			// none, and a newer one's are not this one's to end.
			h.mu.Lock()
			if h.gen != gen || !h.running {
				h.mu.Unlock()
				return
			}
			h.running = false
			for n, set := range h.subs {
				for ch := range set {
					close(ch)
				}
				delete(h.subs, n)
			}
			for n, ch := range h.grants {
				close(ch)
				delete(h.grants, n)
			}
			h.mu.Unlock()
			return
		}
		if channel == h.grantChannel && channel != "" {
			h.grant(payload)
			continue
		}
		h.mu.Lock()
		for ch := range h.subs[payload] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		h.mu.Unlock()
	}
}

// grant delivers a grant "<nonce> <token>" to its waiter. One for a
// nonce nobody awaits (the waiter gave up) is dropped: the waiter's
// clean-up frees the lease.
func (h *hub) grant(payload string) {
	n, t, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	nonce, err1 := strconv.ParseInt(n, 10, 64)
	token, err2 := strconv.ParseInt(t, 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch := h.grants[nonce]; ch != nil {
		select {
		case ch <- token:
		default:
		}
	}
}

func (h *hub) close() {
	h.startMu.Lock()
	defer h.startMu.Unlock()
	h.mu.Lock()
	h.closed = true
	if h.idle != nil {
		h.idle.Stop()
	}
	cancel := h.cancel
	h.mu.Unlock()
	if cancel != nil {
		cancel() // a listener closed for idleness was cancelled already
	}
	ended := make(chan struct{})
	go func() { h.loops.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(cleanupTimeout):
	}
}
