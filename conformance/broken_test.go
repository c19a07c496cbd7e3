package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/memory"
)

// This file is a small in-process lock service whose flaws can be
// switched on one at a time. With no flaw it is a correct (if unfair)
// driver and passes the suite; each flaw is a mistake real lock
// implementations have made, and the suite must catch it.

// flaws are the deliberate bugs.
type flaws struct {
	// noOwnerCheck: Release deletes the lock whoever holds it.
	noOwnerCheck bool
	// twoStepExpiry: the lock is set in one step and its expiry in a
	// second one, which a crash of the client between the two skips: the
	// lock is set without expiry (only a refresh would set one).
	twoStepExpiry bool
	// noExpiry: the server never expires a lock.
	noExpiry bool
	// badTokens: each client counts its own tokens, so tokens repeat and
	// go back across clients.
	badTokens bool
	// tryWaits: TryAcquire of a held lock waits for it to be free.
	tryWaits bool
	// acquireIgnoresCtx: a waiting Acquire ignores its context.
	acquireIgnoresCtx bool
	// lossUnsignalled: the driver has no loss signal and its Refresh
	// succeeds even when the server has dropped the lease, so the lease
	// never ends locally.
	lossUnsignalled bool
	// ghostWaiter: a cancelled Acquire stays queued on the server and is
	// granted the lock (with its TTL) when the holder releases.
	ghostWaiter bool
	// ownerNoCount: the server makes an owner id reentrant without a
	// count: another client presenting the same Owner is granted the held
	// lock, and the first release of either frees it.
	ownerNoCount bool
	// lifo: the driver claims fairness but grants the last waiter first.
	lifo bool
	// lazyOrphan: an attempt that finds the holder expired (before any
	// timer did) grants the lock into a record the server has just
	// deleted, so the next attempt is granted it again.
	lazyOrphan bool
	// truncatedTTL: the server keeps a lease at most one second, whatever
	// TTL it was asked for (a timeout that overflowed or was clamped on the
	// way to the server), while the driver declares no maximum.
	truncatedTTL bool
	// coarseExpiry: the server expires leases on a one-second clock, so a
	// short lease outlives its TTL by up to two seconds on the server.
	coarseExpiry bool
	// perClient: the server knows a holder by its client (one value per
	// connection), not by its grant, so a client that holds the lock is
	// granted it again: goroutines sharing a Locker hold it together.
	perClient bool
}

// space is the lock server: one namespace.
type space struct {
	mu      sync.Mutex
	locks   map[string]*entry
	fence   map[string]uint64
	ghosts  map[string][]time.Duration
	stacks  map[string][]uint64 // lifo: waiters, the last arrived on top
	seq     uint64
	changed chan struct{} // closed (and replaced) when a lock is freed
}

type entry struct {
	client  *brokenDriver
	id      uint64
	owner   string
	token   uint64
	expires time.Time // zero: never
	lost    chan struct{}
}

func newSpace() *space {
	return &space{
		locks:   map[string]*entry{},
		fence:   map[string]uint64{},
		ghosts:  map[string][]time.Duration{},
		stacks:  map[string][]uint64{},
		changed: make(chan struct{}),
	}
}

// currentLocked returns the live holder of name, expiring a stale one.
func (sp *space) currentLocked(name string) *entry {
	e := sp.locks[name]
	if e != nil && !e.expires.IsZero() && !time.Now().Before(e.expires) {
		sp.freeLocked(name)
		e = sp.locks[name] // a ghost may have taken it
	}
	return e
}

// freeLocked frees name; a queued ghost waiter takes it at once.
func (sp *space) freeLocked(name string) {
	delete(sp.locks, name)
	if g := sp.ghosts[name]; len(g) > 0 {
		sp.ghosts[name] = g[1:]
		sp.seq++
		sp.fence[name]++
		sp.locks[name] = &entry{id: sp.seq, token: sp.fence[name], expires: time.Now().Add(g[0])}
	}
	close(sp.changed)
	sp.changed = make(chan struct{})
}

type brokenDriver struct {
	sp     *space
	f      flaws
	tokens uint64 // badTokens: this client's own counter
}

type brokenLease struct {
	d       *brokenDriver
	name    string
	id      uint64
	token   uint64
	granted time.Time
	lost    chan struct{}
}

var (
	_ driver.Locker  = (*brokenDriver)(nil)
	_ driver.Blocker = (*brokenDriver)(nil)
	_ driver.Granted = (*brokenLease)(nil)
)

func (d *brokenDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Fair:           d.f.lifo,
		Backend:        "broken",
		Strategy:       "test",
		Fencing:        true,
		FencingNote:    "per-name counter",
		Wait:           driver.WaitNotify,
		ReleaseOnCrash: driver.ReleaseAfterTTL,
	}
}

func (d *brokenDriver) Close() error { return nil }

// grantLocked makes req the holder of the free name.
func (d *brokenDriver) grantLocked(req driver.Request) *brokenLease {
	sp := d.sp
	sp.seq++
	var tok uint64
	if d.f.badTokens {
		d.tokens++
		tok = d.tokens
	} else {
		sp.fence[req.Name]++
		tok = sp.fence[req.Name]
	}
	e := &entry{client: d, id: sp.seq, owner: req.Owner, token: tok}
	if !d.f.noExpiry && !d.f.twoStepExpiry {
		e.expires = time.Now().Add(d.serverTTL(req.TTL))
	}
	if !d.f.lossUnsignalled {
		e.lost = make(chan struct{})
	}
	sp.locks[req.Name] = e
	return d.leaseOf(req.Name, e)
}

// serverTTL is how long the server keeps a lease asked for with ttl.
func (d *brokenDriver) serverTTL(ttl time.Duration) time.Duration {
	switch {
	case d.f.truncatedTTL:
		return min(ttl, time.Second)
	case d.f.coarseExpiry:
		return ttl.Truncate(time.Second) + 2*time.Second
	}
	return ttl
}

func (d *brokenDriver) leaseOf(name string, e *entry) *brokenLease {
	return &brokenLease{d: d, name: name, id: e.id, token: e.token, granted: time.Now(), lost: e.lost}
}

func (d *brokenDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	sp := d.sp
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sp.mu.Lock()
		stale := sp.locks[req.Name] != nil
		e := sp.currentLocked(req.Name)
		if e == nil {
			ls := d.grantLocked(req)
			if stale && d.f.lazyOrphan {
				delete(sp.locks, req.Name)
			}
			sp.mu.Unlock()
			return ls, nil
		}
		if (d.f.ownerNoCount && req.Owner != "" && e.owner == req.Owner) || (d.f.perClient && e.client == d) {
			sp.mu.Unlock()
			return d.leaseOf(req.Name, e), nil
		}
		wait := sp.changed
		var retry time.Duration
		if !e.expires.IsZero() {
			retry = time.Until(e.expires)
		}
		sp.mu.Unlock()
		if !d.f.tryWaits {
			return nil, &driver.NotAcquiredError{RetryAfter: retry}
		}
		select {
		case <-wait:
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (d *brokenDriver) Acquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	sp := d.sp
	limit := time.After(30 * time.Second) // acquireIgnoresCtx must not leak forever
	var me uint64
	if d.f.lifo {
		sp.mu.Lock()
		sp.seq++
		me = sp.seq
		sp.stacks[req.Name] = append(sp.stacks[req.Name], me)
		sp.mu.Unlock()
		defer func() {
			sp.mu.Lock()
			sp.stacks[req.Name] = slices.DeleteFunc(sp.stacks[req.Name], func(id uint64) bool { return id == me })
			sp.mu.Unlock()
		}()
	}
	for {
		sp.mu.Lock()
		e := sp.currentLocked(req.Name)
		st := sp.stacks[req.Name]
		if e == nil && (!d.f.lifo || st[len(st)-1] == me) {
			ls := d.grantLocked(req)
			sp.mu.Unlock()
			return ls, nil
		}
		if e != nil && d.f.perClient && e.client == d {
			sp.mu.Unlock()
			return d.leaseOf(req.Name, e), nil
		}
		if e == nil {
			e = &entry{} // not our turn: wait for a change
		}
		wait := sp.changed
		var expiry <-chan time.Time
		if !e.expires.IsZero() {
			expiry = time.After(time.Until(e.expires))
		}
		sp.mu.Unlock()
		done := ctx.Done()
		if d.f.acquireIgnoresCtx {
			done = nil
		}
		select {
		case <-wait:
		case <-expiry:
		case <-limit:
			return nil, fmt.Errorf("broken: gave up")
		case <-done:
			if d.f.ghostWaiter {
				sp.mu.Lock()
				sp.ghosts[req.Name] = append(sp.ghosts[req.Name], req.TTL)
				sp.mu.Unlock()
			}
			return nil, ctx.Err()
		}
	}
}

func (ls *brokenLease) Token() uint64         { return ls.token }
func (ls *brokenLease) Lost() <-chan struct{} { return ls.lost }
func (ls *brokenLease) GrantedAt() time.Time  { return ls.granted }

func (ls *brokenLease) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sp := ls.d.sp
	sp.mu.Lock()
	defer sp.mu.Unlock()
	e := sp.currentLocked(ls.name)
	if e == nil || e.id != ls.id {
		if ls.d.f.lossUnsignalled {
			return nil
		}
		return fmt.Errorf("broken: %w", driver.ErrNotHeld)
	}
	if !ls.d.f.noExpiry {
		e.expires = time.Now().Add(ls.d.serverTTL(ttl))
	}
	return nil
}

func (ls *brokenLease) Release(ctx context.Context) error {
	sp := ls.d.sp
	sp.mu.Lock()
	defer sp.mu.Unlock()
	e := sp.currentLocked(ls.name)
	if ls.d.f.noOwnerCheck {
		if e != nil {
			sp.freeLocked(ls.name)
		}
		return nil
	}
	if e == nil || e.id != ls.id {
		return fmt.Errorf("broken: %w", driver.ErrNotHeld)
	}
	sp.freeLocked(ls.name)
	return nil
}

// brokenHarness serves the suite one space with the Revoker and Residue
// hooks.
type brokenHarness struct {
	sp *space
	f  flaws
}

func (h *brokenHarness) NewLocker(context.Context) (*dlock.Locker, error) {
	return dlock.NewLocker(&brokenDriver{sp: h.sp, f: h.f}), nil
}
func (h *brokenHarness) URL() string  { return "" }
func (h *brokenHarness) Close() error { return nil }

func (h *brokenHarness) Revoke(_ context.Context, name string) error {
	sp := h.sp
	sp.mu.Lock()
	defer sp.mu.Unlock()
	e := sp.currentLocked(name)
	if e == nil {
		return fmt.Errorf("broken: revoke %q: %w", name, driver.ErrNotHeld)
	}
	if e.lost != nil {
		close(e.lost)
	}
	sp.freeLocked(name)
	return nil
}

func (h *brokenHarness) Residue(_ context.Context, name string) (int, error) {
	h.sp.mu.Lock()
	defer h.sp.mu.Unlock()
	return len(h.sp.ghosts[name]), nil
}

func brokenMaker(f flaws) conformance.HarnessMaker {
	return func(context.Context) (conformance.Harness, error) {
		return &brokenHarness{sp: newSpace(), f: f}, nil
	}
}

// Broken semaphores: each is the memory driver (the reference) behind a
// wrapper that makes one mistake real semaphore implementations have
// made, and the suite's semaphore cases must catch it. Without a flaw the
// wrapper passes (TestCorrectSemaphoreDriverPasses).

// semFlaws are the deliberate bugs of semaphores.
type semFlaws struct {
	// admitsExtra: an off-by-one in the count (held > N instead of
	// held >= N refuses): N+1 holders at once.
	admitsExtra bool
	// tokensPerClient: each client counts its permits' tokens itself, so
	// tokens repeat and go back across clients.
	tokensPerClient bool
	// nInName: N is part of the semaphore's identity on the server, so two
	// clients that disagree on N silently get two limits.
	nInName bool
	// ghostWaiter: a cancelled Acquire stays queued on the server and is
	// granted a permit (with its TTL) when one frees.
	ghostWaiter bool
	// slowWake: claims a queue (SemaphoreWait WaitQueue) but its Acquire
	// polls every 800ms: a freed permit wakes nobody.
	slowWake bool
	// neverExpires: the server keeps a permit an hour whatever TTL it was
	// asked for, so a holder that dies (stops refreshing) never gives its
	// permit back. A crashed process cannot be modelled otherwise here: the
	// memory driver has no URL a child process could open, so the suite's
	// killed-process part is skipped; its TTL part sees a holder that
	// stopped refreshing, which is what a crash is to a TTL-bound server.
	neverExpires bool
}

// semDriver wraps a memory driver (one client on a shared namespace).
type semDriver struct {
	inner  driver.Locker
	f      semFlaws
	tokens atomic.Uint64 // tokensPerClient: this client's own counter
}

type semLease struct {
	driver.Lease
	d   *semDriver
	tok uint64
}

var (
	_ driver.Locker       = (*semDriver)(nil)
	_ driver.Blocker      = (*semDriver)(nil)
	_ driver.Granted      = (*semLease)(nil)
	_ driver.LossNotifier = (*semLease)(nil)
)

func (d *semDriver) Capabilities() driver.Capabilities { return d.inner.Capabilities() }
func (d *semDriver) Close() error                      { return d.inner.Close() }

// request is what the flawed client sends the server for req.
func (d *semDriver) request(req driver.Request) driver.Request {
	if req.Permits == 0 {
		return req
	}
	if d.f.admitsExtra {
		req.Permits++
	}
	if d.f.nInName {
		req.Name = fmt.Sprintf("%s\x00%d", req.Name, req.Permits)
	}
	if d.f.neverExpires {
		req.TTL = time.Hour
	}
	return req
}

func (d *semDriver) wrap(req driver.Request, ls driver.Lease, err error) (driver.Lease, error) {
	if err != nil || req.Permits == 0 {
		return ls, err
	}
	tok := ls.Token()
	if d.f.tokensPerClient {
		tok = d.tokens.Add(1)
	}
	return &semLease{Lease: ls, d: d, tok: tok}, nil
}

func (d *semDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	ls, err := d.inner.TryAcquire(ctx, d.request(req))
	return d.wrap(req, ls, err)
}

func (d *semDriver) Acquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	sreq := d.request(req)
	blk := d.inner.(driver.Blocker)
	switch {
	case req.Permits > 0 && d.f.slowWake:
		for {
			ls, err := d.inner.TryAcquire(ctx, sreq)
			if !errors.Is(err, driver.ErrNotAcquired) {
				return d.wrap(req, ls, err)
			}
			select {
			case <-time.After(800 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	case req.Permits > 0 && d.f.ghostWaiter:
		ls, err := blk.Acquire(ctx, sreq)
		if err != nil && ctx.Err() != nil {
			// The server never heard of the cancel: the waiter stays
			// queued and takes a permit that nobody will release.
			go func() {
				gctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = blk.Acquire(gctx, sreq)
			}()
		}
		return d.wrap(req, ls, err)
	}
	ls, err := blk.Acquire(ctx, sreq)
	return d.wrap(req, ls, err)
}

func (ls *semLease) Token() uint64 { return ls.tok }

func (ls *semLease) Refresh(ctx context.Context, ttl time.Duration) error {
	if ls.d.f.neverExpires {
		ttl = time.Hour
	}
	return ls.Lease.Refresh(ctx, ttl)
}

func (ls *semLease) GrantedAt() time.Time { return ls.Lease.(driver.Granted).GrantedAt() }
func (ls *semLease) OnLost(f func())      { ls.Lease.(driver.LossNotifier).OnLost(f) }

// semHarness serves the suite one memory namespace through flawed clients.
type semHarness struct {
	ns *memory.Namespace
	f  semFlaws
}

func (h *semHarness) NewLocker(context.Context) (*dlock.Locker, error) {
	return dlock.NewLocker(&semDriver{inner: memory.OpenLocker(h.ns).Driver(), f: h.f}), nil
}
func (h *semHarness) URL() string  { return "" }
func (h *semHarness) Close() error { return nil }

func semMaker(f semFlaws) conformance.HarnessMaker {
	return func(context.Context) (conformance.Harness, error) {
		return &semHarness{ns: memory.NewNamespace(), f: f}, nil
	}
}
