package sqllock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/background"
	"github.com/dlock-go/dlock/internal/knownset"
)

// Config configures New.
type Config struct {
	Dialect  Dialect
	Pool     Pool
	Strategy Strategy
	Table    Table
	// Migrate creates the table and the counter on first use.
	Migrate bool
	// Capabilities fills in the backend's notes; New sets the rest.
	Notes string
}

// Locker is the strategy core: a driver.Locker over a Pool and a Dialect.
// New returns it wrapped in a type that adds driver.Blocker (pinned
// strategies) or driver.Watcher (Version on a Notifier pool); the
// wrappers embed *Locker, so every driver New returns has its methods,
// Core among them.
type Locker struct {
	d        Dialect
	pool     Pool
	strategy Strategy
	t        Table
	caps     driver.Capabilities

	migrateMu sync.Mutex
	migrate   bool // create the table
	ready     bool // migrated (or nothing to do)

	recoverMu sync.Mutex // one Recover at a time (the others then find the marker)

	mu       sync.Mutex
	pinned   map[*pinnedLease]struct{}
	sessions []*session // shared sessions (Sharer), with leases or kept idle
	opening  int        // shared sessions being opened
	closing  bool
	cleanups background.Group // clean-ups of cancelled or lost leases; Close waits

	// rows are names whose row (ForUpdate, Version) this Locker has found
	// (a RowCreator creates the others' in the attempt's script; a row
	// deleted since is missed once and created again), up to maxKnownRows.
	rows knownset.Set
	// contended are names whose last blocking Acquire by this Locker
	// (queueing) found them held: the next one queues at once.
	contended knownset.Set

	hub *hub
	// refresher batches Version leases' refreshes (a VersionBatcher
	// dialect); nil: each is its own statement.
	refresher *refresher
	// id names this Locker's grant channel (VersionQueuer).
	id string
}

var (
	_ driver.Locker        = (*Locker)(nil)
	_ driver.NameValidator = (*Locker)(nil)
	_ driver.Blocker       = blocking{}
	_ driver.Watcher       = watching{}
	_ driver.Blocker       = blockingWatching{}
	_ driver.Watcher       = blockingWatching{}
	_ driver.Blocker       = queueing{}
	_ driver.Watcher       = queueing{}

	// Tests reach the core of any driver New returns through Core.
	_ interface{ Core() *Locker } = blocking{}
	_ interface{ Core() *Locker } = watching{}
	_ interface{ Core() *Locker } = blockingWatching{}
	_ interface{ Core() *Locker } = queueing{}
)

// blocking is a pinned-strategy Locker: the server's lock queue is the wait.
type blocking struct{ *Locker }

// Acquire waits in the server's lock queue until granted or ctx ends.
// Semaphores are not queued (SemaphoreWait is WaitPoll): a semaphore's
// request makes one attempt.
func (b blocking) Acquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	if req.Permits > 0 {
		return b.acquireSem(ctx, req)
	}
	return b.acquirePinned(ctx, req, true)
}

// watching is a Version Locker whose waiters LISTEN for releases.
type watching struct{ *Locker }

// Watch registers interest in releases of name.
func (w watching) Watch(ctx context.Context, req driver.Request) (<-chan struct{}, func(), error) {
	if err := w.ensure(ctx); err != nil { // the channel is named after the resolved table
		return nil, nil, ctxErr(ctx, err)
	}
	if req.Permits > 0 {
		return w.hub.watch(ctx, SemWakeKey(req.Name))
	}
	return w.hub.watch(ctx, req.Name)
}

// blockingWatching is a pinned-strategy Locker whose semaphores' waiters
// LISTEN for the release of a permit (a Notifier pool): locks wait in the
// server's queue, permits are woken.
type blockingWatching struct{ blocking }

// Watch registers interest in the releases of permits of req.Name. A
// lock is never watched (it waits in the server's queue): its channel is
// closed, which makes a caller poll.
func (w blockingWatching) Watch(ctx context.Context, req driver.Request) (<-chan struct{}, func(), error) {
	if req.Permits == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch, func() {}, nil
	}
	if err := w.ensure(ctx); err != nil {
		return nil, nil, ctxErr(ctx, err)
	}
	return w.hub.watch(ctx, SemWakeKey(req.Name))
}

// New returns the driver for cfg.
func New(cfg Config) driver.Locker { return newLocker(cfg).wrapped() }

// maxKnownRows bounds Locker.rows: a few MB of names at most. At
// knownset's default (4 096) a Locker that cycles through 10 000 names
// (dlockbench's scale names=10000) forgot most of them before their next
// use, and so took them with the statement that creates a row (forupdate:
// a batch of four more statements; version: INSERT … ON CONFLICT, which
// locks the row even when it fails) instead of the known name's.
const maxKnownRows = 1 << 15

func newLocker(cfg Config) *Locker {
	l := &Locker{
		d:        cfg.Dialect,
		pool:     cfg.Pool,
		strategy: cfg.Strategy,
		t:        cfg.Table,
		migrate:  cfg.Migrate,
		pinned:   make(map[*pinnedLease]struct{}),
		id:       strconv.FormatUint(rand.Uint64(), 36),
	}
	l.rows.Max = maxKnownRows
	if b, ok := cfg.Dialect.(VersionBatcher); ok && cfg.Strategy == Version {
		l.refresher = newRefresher(l, b)
	}
	l.caps = capabilities(cfg)
	if n, ok := cfg.Pool.(Notifier); ok && (cfg.Strategy == Version || l.caps.MaxPermits > 0) {
		// Version locks' queued waiters and every strategy's semaphore
		// waiters: their releases notify.
		l.hub = newHub(n, l.t.Channel)
	}
	return l
}

// wrapped returns l as the portable layer is to see it: a Blocker for
// the pinned strategies, a Watcher when releases are notified.
func (l *Locker) wrapped() driver.Locker {
	switch {
	case (l.strategy == ForUpdate || l.strategy == Native) && l.hub != nil:
		return blockingWatching{blocking{l}}
	case l.strategy == ForUpdate, l.strategy == Native:
		return blocking{l}
	case l.hub != nil && l.queues():
		return queueing{watching{l}}
	case l.hub != nil:
		return watching{l}
	}
	return l
}

// Core returns l. The wrappers New returns embed *Locker and so inherit
// it: tests and hooks reach the core of any of them (its sessions, pool
// and dialect) with one type assertion, whatever the wrapper.
func (l *Locker) Core() *Locker { return l }

func capabilities(cfg Config) driver.Capabilities {
	c := driver.Capabilities{
		Backend:              cfg.Dialect.Backend(),
		Fencing:              true,
		TokensSurviveRestart: true,
		Notes:                cfg.Notes,
	}
	c.MinTTL, c.MaxTTL = cfg.Dialect.TTLRange(cfg.Strategy)
	switch cfg.Strategy {
	case ForUpdate:
		c.Strategy = string(ForUpdate)
		c.FencingNote = "value of a counter that is never rolled back (" + cfg.Table.Raw + SeqSuffix + "), taken under the row lock; moved on after every crash of the server (Dialect.Recover) before the next token"
		c.Wait = driver.WaitQueue
		c.ReleaseOnCrash = 0
		c.Notes = joinNotes(c.Notes, crashNote)
	case Native:
		c.Strategy = cfg.Dialect.NativeStrategy()
		c.FencingNote = "value of a counter that is never rolled back (" + cfg.Table.Raw + SeqSuffix + "), taken right after the grant and committed with it"
		c.Wait = driver.WaitQueue
		c.ReleaseOnCrash = 0
		c.Notes = joinNotes(c.Notes, crashNote)
	case Version:
		c.Strategy = string(Version)
		c.FencingNote = "the row's version: a counter value taken when the lease is granted"
		c.Wait = driver.WaitPoll
		if _, ok := cfg.Pool.(Notifier); ok {
			c.Wait = driver.WaitNotify
			if _, ok := cfg.Dialect.(VersionQueuer); ok {
				// Waiters queue on the server, granted in arrival order.
				c.Wait, c.Fair = driver.WaitQueue, true
			}
		}
		c.ReleaseOnCrash = driver.ReleaseAfterTTL
		c.Notes = joinNotes(c.Notes, versionNote)
	}
	if sd, ok := cfg.Dialect.(SemDialect); ok {
		if c.MaxPermits = sd.SemMaxPermits(cfg.Strategy); c.MaxPermits > 0 {
			// The server cannot queue "any of N": waiters are woken by
			// the releases' notifications where the database has them,
			// and poll otherwise.
			c.SemaphoreWait = driver.WaitPoll
			if _, ok := cfg.Pool.(Notifier); ok {
				c.SemaphoreWait = driver.WaitNotify
			}
		}
	}
	if n, ok := cfg.Dialect.(FencingNoter); ok {
		if note := n.FencingNote(cfg.Strategy, cfg.Table); note != "" {
			c.FencingNote = note
		}
	}
	return c
}

// FencingNoter is implemented by a dialect whose tokens of a strategy are
// not what the core's note says (FencingNote "" keeps the core's).
type FencingNoter interface {
	FencingNote(s Strategy, t Table) string
}

// versionNote is the caveat of the version strategy.
const versionNote = "a lease row whose expiry is set on the server's clock: no connection is held, so a crashed holder's lock is freed only when its TTL runs out, a server restart keeps the lease, and a paused holder learns of its lost lease at its next keep-alive (fence writes with the token)"

// crashNote is the caveat of the connection-bound strategies.
const crashNote = "the lock lives in the holder's session: a crash of the server frees it at once, and a server back within TTL/3 can grant it again before the holder's next keep-alive tells it (fence writes with the token)"

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Capabilities reports what the strategy guarantees.
func (l *Locker) Capabilities() driver.Capabilities { return l.caps }

// Table returns the lock table.
func (l *Locker) Table() Table { return l.t }

// Dialect returns the dialect.
func (l *Locker) Dialect() Dialect { return l.d }

// Pool returns the pool.
func (l *Locker) Pool() Pool { return l.pool }

// ValidateName rejects names the database cannot store.
func (l *Locker) ValidateName(name string) error { return l.d.ValidateName(name) }

// Close stops the listener and closes the pool if the driver opened it.
// The portable layer has released every lease before.
func (l *Locker) Close() error {
	if l.hub != nil {
		l.hub.close()
	}
	l.cleanups.Stop()
	l.mu.Lock()
	l.closing = true
	left := make([]*pinnedLease, 0, len(l.pinned))
	for p := range l.pinned {
		left = append(left, p)
	}
	var idle []*session
	for _, s := range append([]*session(nil), l.sessions...) {
		if len(s.names) == 0 && s.busy == 0 {
			l.unlist(s)
			idle = append(idle, s)
		}
	}
	l.mu.Unlock()
	for _, s := range idle { // kept for the next lease: back to the pool
		l.giveBack(s)
	}
	for _, p := range left { // leases the portable layer did not end
		p.lose(context.Background())
	}
	l.pool.Close()
	l.cleanups.Wait()
	return nil
}

// goCleanup runs f in the background, where Close waits for it.
func (l *Locker) goCleanup(f func()) { l.cleanups.Go(f) }

// Sessions returns the server session ids of the connections pinned by
// live leases (for tests that cut them).
func (l *Locker) Sessions() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int64, 0, len(l.pinned))
	for p := range l.pinned {
		out = append(out, p.s.conn.Session())
	}
	return out
}

// ensure creates the table on first use. A failure is retried on the
// next call.
func (l *Locker) ensure(ctx context.Context) error {
	l.migrateMu.Lock()
	defer l.migrateMu.Unlock()
	if l.ready {
		return nil
	}
	if l.migrate {
		if _, err := l.pool.Run(ctx, l.d.Migrate(l.t)); err != nil {
			return fmt.Errorf("%s: creating table %s: %w", l.d.Backend(), l.t.Raw, err)
		}
	}
	var problem string
	if _, err := l.pool.Run(ctx, l.d.Check(l.t), &problem); err != nil {
		return fmt.Errorf("%s: checking the server: %w", l.d.Backend(), err)
	}
	if problem != "" {
		return fmt.Errorf("%s: %s: %w", l.d.Backend(), problem, driver.ErrInvalidOption)
	}
	// Name the table as the server does, before anything is derived from
	// its name: "locks" and "public.locks" are one table.
	var schema, name string
	found, err := l.pool.Run(ctx, l.d.Resolve(l.t), &schema, &name)
	if err != nil {
		return fmt.Errorf("%s: resolving table %s: %w", l.d.Backend(), l.t.Raw, err)
	}
	if !found {
		return fmt.Errorf("%s: table %s: %w: it does not exist (create it, or let the driver migrate)", l.d.Backend(), l.t.Raw, driver.ErrInvalidOption)
	}
	t := Canonical(l.d, l.t, schema, name)
	// One table serves one strategy: the strategies' holds do not see
	// each other (a row lock, a lease row, a session lock), so two
	// strategies on one table would both hold one name.
	var owner string
	if _, err := l.pool.Run(ctx, l.d.Claim(t, l.caps.Strategy), &owner); err != nil {
		return fmt.Errorf("%s: claiming table %s for strategy %s: %w", l.d.Backend(), t.Canon, l.caps.Strategy, err)
	}
	if owner != l.caps.Strategy {
		return fmt.Errorf("%s: table %s serves strategy %s, not %s: %w (one table serves one strategy: configure another table)",
			l.d.Backend(), t.Canon, owner, l.caps.Strategy, driver.ErrInvalidOption)
	}
	if l.strategy == ForUpdate {
		// Set the marker now (moving the counter on, if the server has
		// crashed since it was set), so that the first attempts do not
		// all find it missing at once.
		var ignored any
		if _, err := l.pool.Run(ctx, l.d.Recover(t), &ignored); err != nil {
			return fmt.Errorf("%s: moving the token counter of %s on: %w", l.d.Backend(), t.Canon, err)
		}
	}
	l.t = t
	if l.hub != nil {
		l.hub.channel = t.Channel
		if l.queues() {
			l.hub.grantChannel = t.Channel + "_" + l.id
		}
	}
	l.ready = true
	if l.queues() {
		// The listener starts now, in the background, so that the first
		// wait finds it running: a waiter granted the lease while its
		// listener starts would keep the queue waiting until it renews.
		l.goCleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			_ = l.hub.start(sctx)
		})
	}
	return nil
}

// TryAcquire makes one attempt.
func (l *Locker) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	if req.Permits > 0 {
		return l.acquireSem(ctx, req)
	}
	if l.strategy == Version {
		return l.acquireVersion(ctx, req, true)
	}
	return l.acquirePinned(ctx, req, false)
}

func (l *Locker) errorf(format string, args ...any) error {
	return fmt.Errorf(l.d.Backend()+": "+format, args...)
}

// cleanupTimeout bounds clean-up work after a cancel.
const cleanupTimeout = 5 * time.Second

func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// ctxErr returns ctx's error when ctx has ended, err otherwise.
func ctxErr(ctx context.Context, err error) error {
	if e := ctx.Err(); e != nil {
		return e
	}
	return err
}

func isCtx(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Prepare creates the table now (if Config.Migrate) rather than on first
// use: URL openers call it so that Open fails on a wrong address or a
// missing privilege.
func (l *Locker) Prepare(ctx context.Context) error { return l.ensure(ctx) }

// Open returns the driver for cfg once the server has answered ping and
// the table is ready (URL openers use it, so that a wrong address or
// password fails at Open). On failure it closes cfg.Pool.
func Open(ctx context.Context, cfg Config, ping func(context.Context) error) (driver.Locker, error) {
	if err := ping(ctx); err != nil {
		cfg.Pool.Close()
		return nil, fmt.Errorf("%s: connecting: %w", cfg.Dialect.Backend(), err)
	}
	l := newLocker(cfg)
	if err := l.Prepare(ctx); err != nil {
		cfg.Pool.Close()
		return nil, err
	}
	return l.wrapped(), nil
}
