package sqllock

import (
	"context"
	"sync"
	"time"
)

// hub multiplexes the waiters of one Locker over one listening
// connection: the channel is the table's, the payload the released name.
type hub struct {
	n       Notifier
	channel string

	startMu sync.Mutex // held while the listener starts

	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{}
	running bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newHub(n Notifier, channel string) *hub {
	return &hub{n: n, channel: channel, subs: make(map[string]map[chan struct{}]struct{})}
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
	}
	return ch, stop, nil
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
	lis, err := h.n.Listen(ctx, h.channel)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.mu.Lock()
	h.running, h.cancel, h.done = true, cancel, done
	h.mu.Unlock()
	go h.loop(lctx, lis, done)
	return nil
}

func (h *hub) loop(ctx context.Context, lis Listening, done chan struct{}) {
	defer close(done)
	defer lis.Close()
	for {
		name, err := lis.Next(ctx)
		if err != nil {
			// Wake every waiter for good: they fall back to polling, and
			// the next Watch starts a new listener.
			h.mu.Lock()
			h.running = false
			for n, set := range h.subs {
				for ch := range set {
					close(ch)
				}
				delete(h.subs, n)
			}
			h.mu.Unlock()
			return
		}
		h.mu.Lock()
		for ch := range h.subs[name] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		h.mu.Unlock()
	}
}

func (h *hub) close() {
	h.startMu.Lock()
	defer h.startMu.Unlock()
	h.mu.Lock()
	h.closed = true
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-time.After(cleanupTimeout):
		}
	}
}
