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

// Namespace is a set of locks shared by the Lockers opened on it: each
// Locker stands for a separate client.
type Namespace struct {
	mu    sync.Mutex
	locks map[string]*state
	fence map[string]uint64 // last token per name; never reset
	seq   uint64            // grant ids
}

// NewNamespace returns an empty namespace.
func NewNamespace() *Namespace {
	return &Namespace{locks: make(map[string]*state), fence: make(map[string]uint64)}
}

// OpenLocker returns a Locker on ns.
func OpenLocker(ns *Namespace) *dlock.Locker { return dlock.NewLocker(&locker{ns: ns}) }

// Revoke drops the current holder of name as a failing server would: the
// holder's lease is lost (its Done closes with ErrLockLost) and the next
// waiter is granted. It reports whether name was held.
func (ns *Namespace) Revoke(name string) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	st := ns.locks[name]
	if st == nil || st.holder == nil {
		return false
	}
	ns.dropLocked(name, st)
	return true
}

// Held reports whether name is held now.
func (ns *Namespace) Held(name string) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	st := ns.locks[name]
	return st != nil && st.holder != nil
}

// Waiters returns the number of callers queued on name.
func (ns *Namespace) Waiters(name string) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if st := ns.locks[name]; st != nil {
		return st.waiters.Len()
	}
	return 0
}

type state struct {
	holder  *lease
	expires time.Time
	timer   *time.Timer
	waiters list.List // of *waiter, FIFO
}

type waiter struct {
	req driver.Request
	ch  chan *lease // buffered 1: the grant
}

type lease struct {
	ns      *Namespace
	name    string
	owner   string
	token   uint64
	granted time.Time
	lost    chan struct{}
	gone    bool     // no longer the holder (guarded by ns.mu)
	onLost  []func() // called when lost (guarded by ns.mu)
}

type locker struct{ ns *Namespace }

var (
	_ driver.Locker    = (*locker)(nil)
	_ driver.Blocker   = (*locker)(nil)
	_ driver.Inspector = (*locker)(nil)

	_ driver.LossNotifier = (*lease)(nil)
)

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
		MaxTTL: 0,
		Notes:  "one process only; for tests and single-process programs",
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
	st := ns.stateLocked(req.Name)
	if ns.expireLocked(st) {
		st = ns.stateLocked(req.Name) // the expiry may have dropped st
	}
	if st.holder != nil {
		return nil, &driver.NotAcquiredError{RetryAfter: time.Until(st.expires)}
	}
	return ns.grantLocked(req, st), nil
}

func (l *locker) Acquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ns := l.ns
	ns.mu.Lock()
	st := ns.stateLocked(req.Name)
	if ns.expireLocked(st) {
		st = ns.stateLocked(req.Name) // the expiry may have dropped st
	}
	if st.holder == nil {
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
			ns.dropLocked(req.Name, ns.locks[req.Name])
		}
	default:
		st.waiters.Remove(elem)
		ns.gcLocked(req.Name, st)
	}
	ns.mu.Unlock()
	return nil, ctx.Err()
}

func (ns *Namespace) stateLocked(name string) *state {
	st := ns.locks[name]
	if st == nil {
		st = &state{}
		ns.locks[name] = st
	}
	return st
}

// expireLocked drops a holder whose TTL has run out but whose timer has not
// fired yet.
func (ns *Namespace) expireLocked(st *state) bool {
	if ls := st.holder; ls != nil && !time.Now().Before(st.expires) {
		ns.dropLocked(ls.name, st)
		return true
	}
	return false
}

func (ns *Namespace) gcLocked(name string, st *state) {
	if st.holder == nil && st.waiters.Len() == 0 && ns.locks[name] == st {
		delete(ns.locks, name)
	}
}

// grantLocked makes req the holder of a free lock.
func (ns *Namespace) grantLocked(req driver.Request, st *state) *lease {
	ns.fence[req.Name]++
	ls := &lease{
		ns:      ns,
		name:    req.Name,
		owner:   req.Owner,
		token:   ns.fence[req.Name],
		granted: time.Now(),
		lost:    make(chan struct{}),
	}
	st.holder = ls
	ns.armLocked(st, ls, req.TTL)
	return ls
}

func (ns *Namespace) armLocked(st *state, ls *lease, ttl time.Duration) {
	st.expires = time.Now().Add(ttl)
	if st.timer != nil {
		st.timer.Stop()
	}
	st.timer = time.AfterFunc(ttl, func() {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		if st.holder == ls && !time.Now().Before(st.expires) {
			ns.dropLocked(ls.name, st)
		}
	})
}

// dropLocked ends the current holder as lost and hands the lock on.
func (ns *Namespace) dropLocked(name string, st *state) {
	ls := st.holder
	ls.gone = true
	close(ls.lost)
	for _, f := range ls.onLost {
		go f()
	}
	ls.onLost = nil
	ns.freeLocked(name, st)
}

// freeLocked hands the lock to the first waiter, FIFO, or frees it.
func (ns *Namespace) freeLocked(name string, st *state) {
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	st.holder = nil
	if front := st.waiters.Front(); front != nil {
		w := st.waiters.Remove(front).(*waiter)
		w.ch <- ns.grantLocked(w.req, st)
		return
	}
	ns.gcLocked(name, st)
}

func (l *locker) Inspect(ctx context.Context, name string) (driver.Info, error) {
	ns := l.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	info := driver.Info{Fence: ns.fence[name]}
	if st := ns.locks[name]; st != nil {
		info.Waiters = st.waiters.Len()
		if st.holder != nil {
			info.Held = true
			info.Owner = st.holder.owner
			info.TTL = time.Until(st.expires)
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
	st := ns.locks[ls.name]
	if ls.gone || st == nil || st.holder != ls {
		return fmt.Errorf("memory: %w", driver.ErrNotHeld)
	}
	ns.armLocked(st, ls, ttl)
	return nil
}

func (ls *lease) Release(ctx context.Context) error {
	ns := ls.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	st := ns.locks[ls.name]
	if ls.gone || st == nil || st.holder != ls {
		return fmt.Errorf("memory: %w", driver.ErrNotHeld)
	}
	ls.gone = true
	ls.onLost = nil
	ns.freeLocked(ls.name, st)
	return nil
}
