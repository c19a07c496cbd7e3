package sqllock

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// hub multiplexes the waiters of one Locker over one listening
// connection: the channel is the table's, the payload the released name.
//
// With a register function (the dialect is a WaitRegistry) the hub also
// has the server record which names have waiters, so that a release
// notifies only those: a failed attempt at a name this Locker watches
// registers it in the attempt's own statement (registration), and while
// the name has waiters the hub renews the registrations of all its names
// in one statement every registerRenew. A name whose last waiter left
// keeps its registration until it expires (a few useless notifications);
// so does the name of a waiter whose process died.
type hub struct {
	n       Notifier
	channel string
	// register records that names have waiters for registerFor on the
	// server's clock (nil: releases always notify).
	register func(ctx context.Context, names []string) error

	startMu sync.Mutex // held while the listener starts

	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{}
	running bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
	// until is, per registered name, the local time before which its
	// registration is known to be in force on the server.
	until map[string]time.Time
	// gen counts the listeners that died: a registration written while
	// one died is not recorded in until (the server may have lost it).
	gen uint64
}

// Registration timing. A registration lasts registerFor on the server's
// clock, and is known locally to last registerFor less a tenth (for the
// two clocks' drift) from the start of the request that wrote it. While
// the name has waiters the hub renews it every registerRenew; a failed
// attempt writes it itself unless more than registerFor/2 of it is known
// to be left, so that at least registerFor/2 - registerRenew (1.7s)
// remains when the next renewal is due.
const (
	registerFor   = 10 * time.Second
	registerRenew = registerFor / 3
)

func newHub(n Notifier, channel string, register func(context.Context, []string) error) *hub {
	return &hub{n: n, channel: channel, register: register,
		subs: make(map[string]map[chan struct{}]struct{}), until: make(map[string]time.Time)}
}

// watch registers a waiter of name. The LISTEN is active before it
// returns, so a release after it is seen (notified once the waiter's next
// failed attempt has registered the name, registration).
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

// registration returns how long an attempt at name is to register its
// waiters for on the server if it fails (0: not at all, when this Locker
// has no waiter of name or its registration is known to last long
// enough), and the listener generation to pass to registered.
func (h *hub) registration(name string) (time.Duration, uint64) {
	if h.register == nil {
		return 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs[name]) == 0 || time.Until(h.until[name]) > registerFor/2 {
		return 0, h.gen
	}
	return registerFor, h.gen
}

// registered records that the request started at start registered names
// for registerFor, unless a listener died since gen (the server may have
// lost it).
func (h *hub) registered(names []string, start time.Time, gen uint64) {
	until := start.Add(registerFor - registerFor/10)
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen != h.gen {
		return
	}
	for _, n := range names {
		if until.After(h.until[n]) {
			h.until[n] = until
		}
	}
}

// registerNames writes the registrations of names and records how long
// they are known to last: registerFor from the start of the request, less
// the drift of the two clocks over it.
func (h *hub) registerNames(ctx context.Context, names []string) error {
	h.mu.Lock()
	gen := h.gen
	h.mu.Unlock()
	start := time.Now()
	if err := h.register(ctx, names); err != nil {
		return err
	}
	h.registered(names, start, gen)
	return nil
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
	renewed := make(chan struct{})
	if h.register != nil {
		go h.renew(lctx, renewed)
	} else {
		close(renewed)
	}
	go h.loop(lctx, cancel, lis, done, renewed)
	return nil
}

// loop delivers notifications until the listener fails or is closed;
// then it stops the listener's renewals and closes done.
func (h *hub) loop(ctx context.Context, cancel context.CancelFunc, lis Listening, done, renewed chan struct{}) {
	defer func() { cancel(); <-renewed; close(done) }()
	defer lis.Close()
	for {
		_, name, err := lis.Next(ctx)
		if err != nil {
			// Wake every waiter for good: they fall back to polling, and
			// the next Watch starts a new listener.
			h.mu.Lock()
			h.running = false
			// The server may have restarted and lost the registrations:
			// the next watch of each name writes its own again.
			clear(h.until)
			h.gen++
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

// renew renews the registrations of the names that have waiters every
// registerRenew, in one statement, until the listener ends. A failed
// renewal is tried again at the next tick; meanwhile a waiter may miss a
// wake-up once its registration expires, and its fallback timer retries.
func (h *hub) renew(ctx context.Context, renewed chan struct{}) {
	defer close(renewed)
	t := time.NewTicker(registerRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		names := make([]string, 0, len(h.subs))
		for n := range h.subs {
			if !strings.HasPrefix(n, semWakePrefix) { // semaphores' releases always notify
				names = append(names, n)
			}
		}
		for n := range h.until {
			if h.subs[n] == nil {
				delete(h.until, n) // no waiter: let it expire
			}
		}
		h.mu.Unlock()
		if len(names) == 0 {
			continue
		}
		// Sorted: two Lockers renewing overlapping names lock their rows
		// in the same order, and never deadlock.
		slices.Sort(names)
		rctx, cancel := context.WithTimeout(ctx, registerRenew)
		_ = h.registerNames(rctx, names)
		cancel()
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
