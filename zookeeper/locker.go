package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/background"
	"github.com/dlock-go/dlock/internal/knownset"
)

// OpenLocker returns a Locker that uses conn, a connection the caller
// opened and keeps: Close never closes it.
//
// Loss detection is weaker than with a Locker opened by URL, which watches
// the replies of its own connection: here a lease is reported lost
// SessionTimeout/3 (minus a margin) after the connection is seen down,
// because go-zookeeper notices a silent connection 2/3 of the session
// timeout after the last packet it read; a one-way partition in which the
// client still receives but the server no longer hears it is not detected
// before the session expires. Open by URL when you can.
//
// OpenLocker returns an error wrapping dlock.ErrInvalidOption if conn is
// nil, opts.Prefix or opts.Recipe is invalid, or opts.SessionTimeout is
// outside (0, MaxSessionTimeout]; it makes no server call.
func OpenLocker(conn *zk.Conn, opts *Options) (*dlock.Locker, error) {
	if conn == nil {
		return nil, fmt.Errorf("zookeeper: OpenLocker needs a connection: %w", driver.ErrInvalidOption)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	s := newSession(conn, nil, o.SessionTimeout, o.Events)
	return dlock.NewLockerWith(newLocker(conn, false, cfg, s), &dlock.Options{Observer: o.Observer}), nil
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

func openURL(ctx context.Context, raw string) (driver.Locker, error) {
	p, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	cfg := config{prefix: p.prefix, recipe: p.recipe, acl: zk.WorldACL(zk.PermAll)}
	if p.user != "" {
		// Nodes are created for the authenticated identity: other users
		// can neither see nor delete them.
		cfg.acl = zk.AuthACL(zk.PermAll)
	}
	// go-zookeeper logs to stderr by default: this logger drops its
	// lines, or hands them to the Locker's Observer.
	l, err := dialLocker(ctx, p, cfg, driver.NewClientLog(raw), nil)
	if err != nil {
		return nil, err
	}
	l.url = p
	return l, nil
}

// dialLocker opens a session on p's ensemble and returns its locker, which
// owns the connection; parents is the set of known parents it shares with
// the Locker's other sessions (see shards.go; nil: a set of its own), clog
// their logger.
func dialLocker(ctx context.Context, p *parsedURL, cfg config, clog *driver.ClientLog, parents *knownset.Set) (*locker, error) {
	tr := newTracker()
	s := newSession(nil, tr, p.sessionTimeout, nil)
	conn, _, err := zk.Connect(p.hosts, p.sessionTimeout,
		zk.WithDialer(tr.dial),
		zk.WithLogger(clog),
		zk.WithLogInfo(false),
		zk.WithEventCallback(s.onEvent))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: connect: %w", err)
	}
	s.conn = conn
	if err := s.waitSession(ctx, p.connectTimeout); err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("zookeeper: no session with %s within connect_timeout=%v: %w", strings.Join(p.hosts, ","), p.connectTimeout, err)
	}
	if p.user != "" {
		if _, err := call(ctx, func() (struct{}, error) {
			return struct{}{}, conn.AddAuth("digest", []byte(p.user+":"+p.password))
		}); err != nil {
			conn.Close()
			return nil, fmt.Errorf("zookeeper: digest authentication as %q: %w", p.user, err)
		}
	}
	l := newLocker(conn, true, cfg, s)
	l.clog = clog
	if parents != nil {
		l.parents = parents
	}
	return l, nil
}

// locker is the driver.Locker of one zk.Conn (one session).
type locker struct {
	conn *zk.Conn
	own  bool              // Close closes conn
	clog *driver.ClientLog // conn's logger, when opened from a URL
	cfg  config
	s    *session

	parents *knownset.Set // parent nodes known to exist (see maxKnownParents), shared by the Locker's sessions
	shards                // the Locker's other sessions (shards.go)
	flights flights       // the round trips refreshes share

	done chan struct{} // closed by Close
	once sync.Once
	wg   sync.WaitGroup

	// Counters for tests and benchmarks.
	recovered   atomic.Int64 // creates whose reply was lost, found again by GUID
	strays      atomic.Int64 // second nodes of one attempt, deleted
	slowGrants  atomic.Int64 // grants that needed a getData for the token
	fastGrants  atomic.Int64 // waiters granted on the predecessor's deletion event
	waitRelists atomic.Int64 // waiters that listed again on it

	jmu     sync.Mutex
	orphans []orphan      // nodes to delete in the background
	jwake   chan struct{} // cap 1

	// Clean-ups of failed or cancelled attempts running in the background
	// (see cleanup); Close waits for them.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       background.Group
}

var (
	_ driver.Locker    = (*locker)(nil)
	_ driver.Blocker   = (*locker)(nil)
	_ driver.Inspector = (*locker)(nil)
)

func newLocker(conn *zk.Conn, own bool, cfg config, s *session) *locker {
	l := &locker{conn: conn, own: own, cfg: cfg, s: s, done: make(chan struct{}), jwake: make(chan struct{}, 1)}
	l.parents = &knownset.Set{Max: maxKnownParents}
	l.bgCtx, l.bgCancel = context.WithCancel(context.Background())
	s.conn = conn
	s.janitor = l.addOrphan
	l.wg.Add(2)
	go func() { defer l.wg.Done(); s.run(l.done) }()
	go func() { defer l.wg.Done(); l.janitor() }()
	return l
}

func (l *locker) Capabilities() driver.Capabilities {
	c := driver.Capabilities{
		Backend:              "zookeeper",
		Strategy:             l.cfg.recipe,
		Fencing:              true,
		FencingNote:          "czxid of the lock node: a global zxid, never reset (survives restarts and re-created parents)",
		TokensSurviveRestart: true,
		SessionBound:         true,
		ReleaseOnCrash:       l.s.crashBound(),
		// The TTL is ignored (the session bounds the lease), so every TTL
		// is honoured; the range is that of ZooKeeper's own durations.
		MinTTL: dlock.MinTTL,
		MaxTTL: MaxSessionTimeout,
		// Semaphores queue as the fair recipe's locks do, whatever the
		// recipe (semaphore.go).
		MaxPermits:    MaxPermits,
		SemaphoreWait: driver.WaitQueue,
		SemaphoreFair: true,
	}
	if l.cfg.recipe == RecipeFair {
		c.Fair = true
		c.Wait = driver.WaitQueue
		c.Notes = "EPHEMERAL_SEQUENTIAL nodes with protected (GUID) names; a release wakes the next waiter (and refreshes the one after it); a lease lasts as long as the session"
	} else {
		c.Wait = driver.WaitNotify
		c.Notes = "one ephemeral node per name, every waiter watches it (herd effect); for comparison"
	}
	return c
}

func (l *locker) Close() error {
	l.once.Do(func() {
		l.stopGrowing()
		l.bg.Stop()
		if l.own {
			// Closing the session deletes every node it owns: the
			// clean-ups in flight are moot.
			l.bgCancel()
		}
		l.bg.Wait()
		l.bgCancel()
		if !l.own {
			// Delete what lost leases left in the user's session.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			l.sweep(ctx)
			cancel()
		}
		close(l.done)
		l.wg.Wait()
		l.s.closeAll()
		if l.own {
			l.conn.Close()
		}
		l.closeShards()
	})
	return nil
}

func (l *locker) closed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (l *locker) check() error {
	if l.closed() {
		return fmt.Errorf("zookeeper: %w", driver.ErrClosed)
	}
	return nil
}

func (l *locker) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	return l.acquire(ctx, req, false)
}

func (l *locker) Acquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	return l.acquire(ctx, req, true)
}

func (l *locker) acquire(ctx context.Context, req driver.Request, wait bool) (driver.Lease, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	l.busy(1)
	defer l.busy(-1)
	x := l.shard(req.Name)
	if x.cfg.recipe == RecipeBasic && req.Permits == 0 {
		return x.basicAcquire(ctx, req, wait)
	}
	return x.fairAcquire(ctx, req, wait)
}

// parent returns the znode of name: the parent of its queue (fair) or of
// its one lock node (basic).
func (l *locker) parent(name string) string { return l.cfg.prefix + "/" + escapeName(name) }

// wrapErr gives a go-zookeeper error the package prefix and maps a closed
// connection onto ErrClosed.
func (l *locker) wrapErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, zk.ErrClosing) || (l.closed() && errors.Is(err, zk.ErrConnectionClosed)) {
		return fmt.Errorf("zookeeper: %w: %w", driver.ErrClosed, err)
	}
	return fmt.Errorf("zookeeper: %w", err)
}

func newGUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ensureParents creates the prefix (persistent nodes) and the name's
// parent: a container node for the fair recipe (the server deletes it once
// it has had children and has none; the czxid tokens of its children are
// global zxids, so they keep increasing when it is re-created), a
// persistent node for the basic recipe (whose release checks the parent's
// data version, which must never start again at 0).
func (l *locker) ensureParents(ctx context.Context, parent string, container bool) error {
	create := func(path string, container bool) error {
		_, err := call(ctx, func() (string, error) {
			if container {
				p, err := l.conn.CreateContainer(path, nil, zk.FlagContainer, l.cfg.acl)
				if err == nil || errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrConnectionClosed) {
					return p, err
				}
				// A server older than 3.5 does not know containers: fall
				// back to a persistent node.
			}
			return l.conn.Create(path, nil, zk.FlagPersistent, l.cfg.acl)
		})
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	}
	err := create(parent, container)
	if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	// Create the prefix from the top, then the parent again.
	els := strings.Split(l.cfg.prefix[1:], "/")
	for i := range els {
		if err := create("/"+strings.Join(els[:i+1], "/"), false); err != nil {
			return err
		}
	}
	return create(parent, container)
}
