package memory

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Scheme is the URL scheme this package registers.
const Scheme = "mem"

func init() { dlock.Register(Scheme, openURL) }

var named struct {
	sync.Mutex
	m map[string]*Namespace
}

func openURL(ctx context.Context, raw string) (driver.Locker, error) {
	u, err := driver.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	if err := u.Params.Err(); err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	if u.HasUserinfo || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("%w: memory: want mem:// or mem://NAME", dlock.ErrInvalidOption)
	}
	if u.Host == "" {
		return &locker{ns: NewNamespace()}, nil
	}
	named.Lock()
	defer named.Unlock()
	if named.m == nil {
		named.m = make(map[string]*Namespace)
	}
	ns := named.m[u.Host]
	if ns == nil {
		ns = NewNamespace()
		named.m[u.Host] = ns
	}
	return &locker{ns: ns}, nil
}

// Namespace is a set of locks and semaphores shared by the Lockers opened
// on it: each Locker stands for a separate client.
type Namespace struct {
	mu    sync.Mutex
	locks map[key]*state
	fence map[key]uint64 // last token per name; never reset
}

// key names a lock (sem false) or a semaphore: the two namespaces are apart.
type key struct {
	name string
	sem  bool
}

// NewNamespace returns an empty namespace.
func NewNamespace() *Namespace {
	return &Namespace{locks: make(map[key]*state), fence: make(map[key]uint64)}
}

// OpenLocker returns a Locker on ns.
func OpenLocker(ns *Namespace) *dlock.Locker { return dlock.NewLocker(&locker{ns: ns}) }

// Revoke drops the current holder of the lock name as a failing server
// would: the holder's lease is lost (its Done closes with ErrLockLost) and
// the next waiter is granted. It reports whether name was held.
func (ns *Namespace) Revoke(name string) bool { return ns.revoke(key{name: name}) }

// RevokePermit drops the oldest holder of a permit of the semaphore name,
// as Revoke does for a lock. It reports whether any permit was held.
func (ns *Namespace) RevokePermit(name string) bool { return ns.revoke(key{name: name, sem: true}) }

func (ns *Namespace) revoke(k key) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	st := ns.locks[k]
	if st == nil || len(st.holders) == 0 {
		return false
	}
	ns.dropLocked(st, st.holders[0])
	return true
}

// Held reports whether the lock name is held now.
func (ns *Namespace) Held(name string) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	st := ns.locks[key{name: name}]
	return st != nil && len(st.holders) > 0
}

// Holders returns the number of permits of the semaphore name held now.
func (ns *Namespace) Holders(name string) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if st := ns.locks[key{name: name, sem: true}]; st != nil {
		return len(st.holders)
	}
	return 0
}

// Waiters returns the number of callers queued on the lock name.
func (ns *Namespace) Waiters(name string) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if st := ns.locks[key{name: name}]; st != nil {
		return st.waiters.Len()
	}
	return 0
}

// state is a lock (permits 1) or a semaphore in use: it exists while it
// has holders or waiters, and its number of permits is fixed meanwhile.
type state struct {
	key     key
	permits int
	holders []*lease  // at most permits, oldest first
	hold1   [1]*lease // holders' first backing array: a lock costs no allocation for it
	waiters list.List // of *waiter, FIFO
}

type waiter struct {
	req driver.Request
	ch  chan *lease // buffered 1: the grant
}

type lease struct {
	ns      *Namespace
	st      *state
	owner   string
	token   uint64
	granted time.Time
	expires time.Time   // guarded by ns.mu
	timer   *time.Timer // guarded by ns.mu
	lost    chan struct{}
	gone    bool     // no longer a holder (guarded by ns.mu)
	onLost  []func() // called when lost (guarded by ns.mu)
}

type locker struct{ ns *Namespace }

var (
	_ driver.Locker    = (*locker)(nil)
	_ driver.Blocker   = (*locker)(nil)
	_ driver.Inspector = (*locker)(nil)

	_ driver.LossNotifier = (*lease)(nil)
)

// MaxPermits is the largest semaphore the memory driver keeps.
const MaxPermits = 1 << 20

func (l *locker) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Backend:              "memory",
		Strategy:             "in-process",
		Fencing:              true,
		FencingNote:          "per-name counter in the namespace",
		TokensSurviveRestart: false,
		Fair:                 true,
		Wait:                 driver.WaitQueue,
		ReleaseOnCrash:       driver.ReleaseAfterTTL,
		// Any TTL: expiry is computed in this process with time.Time
		// arithmetic, which saturates rather than wraps.
		MaxTTL:        0,
		MaxPermits:    MaxPermits,
		SemaphoreWait: driver.WaitQueue,
		SemaphoreFair: true,
		Notes:         "one process only; for tests and single-process programs",
	}
}

func (l *locker) Close() error { return nil }

func (l *locker) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ns := l.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	st, err := ns.stateLocked(req)
	if err != nil {
		return nil, err
	}
	if len(st.holders) >= st.permits {
		return nil, &driver.NotAcquiredError{RetryAfter: time.Until(st.holders[0].expires)}
	}
	return ns.grantLocked(req, st), nil
}

func (l *locker) Acquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ns := l.ns
	ns.mu.Lock()
	st, err := ns.stateLocked(req)
	if err != nil {
		ns.mu.Unlock()
		return nil, err
	}
	if len(st.holders) < st.permits && st.waiters.Len() == 0 {
		ls := ns.grantLocked(req, st)
		ns.mu.Unlock()
		return ls, nil
	}
	w := &waiter{req: req, ch: make(chan *lease, 1)}
	elem := st.waiters.PushBack(w)
	ns.mu.Unlock()

	select {
	case ls := <-w.ch:
		return ls, nil
	case <-ctx.Done():
	}
	ns.mu.Lock()
	select {
	case ls := <-w.ch:
		// Granted while we gave up: pass it on, leave nothing behind.
		if !ls.gone {
			ns.freeLocked(st, ls)
		}
	default:
		st.waiters.Remove(elem)
		ns.gcLocked(st)
	}
	ns.mu.Unlock()
	return nil, ctx.Err()
}

// stateLocked returns the state of req's lock or semaphore, with its
// expired holders dropped; a semaphore in use with another number of
// permits is refused.
func (ns *Namespace) stateLocked(req driver.Request) (*state, error) {
	k := key{name: req.Name, sem: req.Permits > 0}
	n := max(req.Permits, 1)
	st := ns.locks[k]
	if st == nil {
		st = &state{key: k, permits: n}
		st.holders = st.hold1[:0]
		ns.locks[k] = st
		return st, nil
	}
	now := time.Now()
	for i := 0; i < len(st.holders); {
		if ls := st.holders[i]; !now.Before(ls.expires) {
			// Its timer has not fired yet: drop it now.
			ns.dropLocked(st, ls)
			if ns.locks[k] != st { // the last holder went and nobody waits
				return ns.stateLocked(req)
			}
			continue
		}
		i++
	}
	if st.permits != n {
		return nil, fmt.Errorf("memory: %d permits while in use, not %d: %w", st.permits, n, driver.ErrInvalidOption)
	}
	return st, nil
}

func (ns *Namespace) gcLocked(st *state) {
	if len(st.holders) == 0 && st.waiters.Len() == 0 && ns.locks[st.key] == st {
		delete(ns.locks, st.key)
	}
}

// grantLocked makes req a holder of st, which has a free permit.
func (ns *Namespace) grantLocked(req driver.Request, st *state) *lease {
	ns.fence[st.key]++
	ls := &lease{
		ns:      ns,
		st:      st,
		owner:   req.Owner,
		token:   ns.fence[st.key],
		granted: time.Now(),
		lost:    make(chan struct{}),
	}
	st.holders = append(st.holders, ls)
	ns.armLocked(ls, req.TTL)
	return ls
}

func (ns *Namespace) armLocked(ls *lease, ttl time.Duration) {
	ls.expires = time.Now().Add(ttl)
	if ls.timer != nil {
		ls.timer.Stop()
	}
	ls.timer = time.AfterFunc(ttl, func() {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		if !ls.gone && !time.Now().Before(ls.expires) {
			ns.dropLocked(ls.st, ls)
		}
	})
}

// dropLocked ends the holder ls of st as lost and hands its permit on.
func (ns *Namespace) dropLocked(st *state, ls *lease) {
	close(ls.lost)
	for _, f := range ls.onLost {
		go f()
	}
	ls.onLost = nil
	ns.freeLocked(st, ls)
}

// freeLocked removes the holder ls and hands its permit to the first
// waiter, FIFO, or frees it.
func (ns *Namespace) freeLocked(st *state, ls *lease) {
	ls.gone = true
	if ls.timer != nil {
		ls.timer.Stop()
		ls.timer = nil
	}
	for i, h := range st.holders {
		if h == ls {
			st.holders = append(st.holders[:i], st.holders[i+1:]...)
			break
		}
	}
	if front := st.waiters.Front(); front != nil {
		w := st.waiters.Remove(front).(*waiter)
		w.ch <- ns.grantLocked(w.req, st)
		return
	}
	ns.gcLocked(st)
}

func (l *locker) Inspect(ctx context.Context, name string) (driver.Info, error) {
	ns := l.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	k := key{name: name}
	info := driver.Info{Fence: ns.fence[k]}
	if st := ns.locks[k]; st != nil {
		info.Waiters = st.waiters.Len()
		if len(st.holders) > 0 {
			info.Held = true
			info.Owner = st.holders[0].owner
			info.TTL = time.Until(st.holders[0].expires)
		}
	}
	return info, nil
}

func (ls *lease) Token() uint64         { return ls.token }
func (ls *lease) Lost() <-chan struct{} { return ls.lost }
func (ls *lease) GrantedAt() time.Time  { return ls.granted }

func (ls *lease) OnLost(f func()) {
	ns := ls.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	select {
	case <-ls.lost:
		go f()
	default:
		if !ls.gone { // a released lease is never lost
			ls.onLost = append(ls.onLost, f)
		}
	}
}

func (ls *lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ns := ls.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ls.gone {
		return fmt.Errorf("memory: %w", driver.ErrNotHeld)
	}
	ns.armLocked(ls, ttl)
	return nil
}

func (ls *lease) Release(ctx context.Context) error {
	ns := ls.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ls.gone {
		return fmt.Errorf("memory: %w", driver.ErrNotHeld)
	}
	ls.onLost = nil
	ns.freeLocked(ls.st, ls)
	return nil
}
