package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/background"
)

// Scheme is the URL scheme this package registers.
const Scheme = "zk"

// Recipes.
const (
	// RecipeFair is the default: EPHEMERAL_SEQUENTIAL children in arrival
	// order, each waiter watching its predecessor.
	RecipeFair = "fair"
	// RecipeBasic is the naive recipe: one ephemeral node per name, every
	// waiter watching it (the herd effect). Kept for comparison.
	RecipeBasic = "basic"
)

// Defaults.
const (
	DefaultPrefix         = "/dlock"
	DefaultSessionTimeout = 10 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	defaultPort           = "2181"
	// assumedMaxSession is what Capabilities.ReleaseOnCrash reports for a
	// user's connection whose session timeout was not given: ZooKeeper's
	// default maximum (20 × the default tickTime of 2s).
	assumedMaxSession = 40 * time.Second
	cleanupTimeout    = 5 * time.Second
)

func init() { dlock.Register(Scheme, openURL) }

// Options configures OpenLocker. A nil *Options means the defaults.
type Options struct {
	// Prefix is the znode under which lock nodes live (default "/dlock").
	// It must be absolute, must not be the root or under /zookeeper; its
	// missing elements are created as persistent nodes on first use.
	Prefix string

	// Recipe is RecipeFair (default) or RecipeBasic.
	Recipe string

	// SessionTimeout is the session timeout that conn's session has (the
	// value the server negotiated: it clamps the requested timeout to
	// [2, 20] × tickTime). A lease is reported lost when the connection has
	// been down long enough for the session to have possibly expired. Zero
	// means unknown: a lease is then reported lost as soon as the
	// connection is seen down.
	SessionTimeout time.Duration

	// Events is the channel zk.Connect returned with conn. When set, the
	// Locker reads it (do not read it elsewhere) and learns of a broken
	// connection at once; without it the Locker polls conn.State every
	// 50ms.
	Events <-chan zk.Event

	// ACL is the ACL of the nodes the Locker creates (default
	// zk.WorldACL(zk.PermAll)).
	ACL []zk.ACL
}

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
	return dlock.NewLocker(newLocker(conn, false, cfg, s)), nil
}

type config struct {
	prefix string
	recipe string
	acl    []zk.ACL
}

func (o *Options) config() (config, error) {
	c := config{prefix: o.Prefix, recipe: o.Recipe, acl: o.ACL}
	if c.prefix == "" {
		c.prefix = DefaultPrefix
	}
	if c.recipe == "" {
		c.recipe = RecipeFair
	}
	if len(c.acl) == 0 {
		c.acl = zk.WorldACL(zk.PermAll)
	}
	if c.recipe != RecipeFair && c.recipe != RecipeBasic {
		return c, fmt.Errorf("zookeeper: recipe %q: want %s or %s: %w", c.recipe, RecipeFair, RecipeBasic, driver.ErrInvalidOption)
	}
	if err := validatePrefix(c.prefix); err != nil {
		return c, err
	}
	if err := checkSessionTimeout(o.SessionTimeout); err != nil {
		return c, fmt.Errorf("zookeeper: Options.SessionTimeout: %w", err)
	}
	return c, nil
}

// parsedURL is a zk:// URL taken apart.
type parsedURL struct {
	hosts          []string
	user, password string
	prefix         string
	recipe         string
	sessionTimeout time.Duration
	connectTimeout time.Duration
}

// parseURL reads zk://[user:password@]host[:port][,host[:port]...][/prefix][?params].
// Errors never contain the password.
func parseURL(raw string) (*parsedURL, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("zookeeper: %s: %w", fmt.Sprintf(format, args...), driver.ErrInvalidOption)
	}
	u, err := driver.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	if u.Scheme != Scheme {
		return nil, bad("want a %s:// URL", Scheme)
	}
	p := &parsedURL{user: u.User, password: u.Password}
	if u.HasUserinfo && (u.User == "" || !u.HasPassword) {
		return nil, bad("malformed user:password@ (want digest credentials)")
	}
	if len(u.Hosts) == 0 {
		return nil, bad("missing host")
	}
	for _, h := range u.Hosts {
		if h == "" {
			return nil, bad("empty host in %q", u.Host)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
				return nil, bad("malformed host %q", h)
			}
			host, port = strings.Trim(h, "[]"), defaultPort
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 || host == "" {
			return nil, bad("malformed host %q", h)
		}
		p.hosts = append(p.hosts, net.JoinHostPort(host, port))
	}
	if u.Path == "" || u.Path == "/" {
		p.prefix = DefaultPrefix
	} else {
		p.prefix = u.Path
	}
	if err := validatePrefix(p.prefix); err != nil {
		return nil, err
	}
	params := u.Params
	p.sessionTimeout = params.Duration("session_timeout", DefaultSessionTimeout)
	p.connectTimeout = params.Duration("connect_timeout", DefaultConnectTimeout)
	p.recipe = params.Enum("recipe", RecipeFair, RecipeFair, RecipeBasic)
	if err := params.Err(); err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	if p.sessionTimeout < 100*time.Millisecond {
		return nil, bad("session_timeout %v is below 100ms", p.sessionTimeout)
	}
	if err := checkSessionTimeout(p.sessionTimeout); err != nil {
		return nil, fmt.Errorf("zookeeper: session_timeout: %w", err)
	}
	if p.connectTimeout <= 0 {
		return nil, bad("connect_timeout must be positive")
	}
	return p, nil
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
	tr := newTracker()
	s := newSession(nil, tr, p.sessionTimeout, nil)
	conn, _, err := zk.Connect(p.hosts, p.sessionTimeout,
		zk.WithDialer(tr.dial),
		zk.WithLogger(discardLogger{}),
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
	return newLocker(conn, true, cfg, s), nil
}

// locker is the driver.Locker of one zk.Conn (one session).
type locker struct {
	conn *zk.Conn
	own  bool // Close closes conn
	cfg  config
	s    *session
	// pipeline sends a getChildren along with each create, so that a
	// contended acquire learns its place without another round trip. Off:
	// the create's reply already tells an uncontended acquire that it
	// holds the lock, and measured (BenchmarkUncontended, "piped") the
	// extra request costs the uncontended case more than it saves the
	// contended one, whose listing is off the critical path anyway.
	pipeline bool

	done chan struct{} // closed by Close
	once sync.Once
	wg   sync.WaitGroup

	// Counters for tests and benchmarks.
	recovered   atomic.Int64 // creates whose reply was lost, found again by GUID
	strays      atomic.Int64 // second nodes of one attempt, deleted
	relistings  atomic.Int64 // pipelined listings that missed our node
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
	if l.cfg.recipe == RecipeBasic {
		return l.basicAcquire(ctx, req, wait)
	}
	return l.fairAcquire(ctx, req, wait)
}

// parent returns the znode of name: the parent of its queue (fair) or of
// its one lock node (basic).
func (l *locker) parent(name string) string { return l.cfg.prefix + "/" + escapeName(name) }

func (l *locker) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := l.check(); err != nil {
		return driver.Info{}, err
	}
	parent := l.parent(name)
	if l.cfg.recipe == RecipeBasic {
		data, st, err := getNode(ctx, l.conn, parent+"/"+basicNode)
		if errors.Is(err, zk.ErrNoNode) {
			return driver.Info{Waiters: -1}, nil
		}
		if err != nil {
			return driver.Info{}, l.wrapErr(err)
		}
		_, owner, _ := strings.Cut(string(data), "\n")
		return driver.Info{Held: true, Owner: owner, Fence: uint64(st.Czxid), Waiters: -1}, nil
	}
	for {
		kids, err := children(ctx, l.conn, parent)
		if errors.Is(err, zk.ErrNoNode) {
			return driver.Info{}, nil
		}
		if err != nil {
			return driver.Info{}, l.wrapErr(err)
		}
		if len(kids) == 0 {
			return driver.Info{}, nil
		}
		q := sortQueue(kids)
		data, st, err := getNode(ctx, l.conn, parent+"/"+q[0].name)
		if errors.Is(err, zk.ErrNoNode) {
			continue // the holder left meanwhile: look again
		}
		if err != nil {
			return driver.Info{}, l.wrapErr(err)
		}
		return driver.Info{Held: true, Owner: string(data), Fence: uint64(st.Czxid), Waiters: len(q) - 1}, nil
	}
}

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

// result is the outcome of one go-zookeeper call.
type result[T any] struct {
	v   T
	err error
}

// call runs f, a blocking go-zookeeper call (they take no context), and
// returns its result, or ctx's error as soon as ctx ends; f then finishes in
// the background and its result is dropped. Callers that must know what a
// write did use their own channel.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f()
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	ch := make(chan result[T], 1)
	go func() {
		v, err := f()
		ch <- result[T]{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

type nodeData struct {
	data []byte
	st   *zk.Stat
	ch   <-chan zk.Event
}

func getNode(ctx context.Context, c *zk.Conn, path string) ([]byte, *zk.Stat, error) {
	r, err := call(ctx, func() (nodeData, error) {
		d, st, err := c.Get(path)
		return nodeData{data: d, st: st}, err
	})
	return r.data, r.st, err
}

func getW(ctx context.Context, c *zk.Conn, path string) (nodeData, error) {
	return call(ctx, func() (nodeData, error) {
		d, st, ch, err := c.GetW(path)
		return nodeData{data: d, st: st, ch: ch}, err
	})
}

func children(ctx context.Context, c *zk.Conn, path string) ([]string, error) {
	return call(ctx, func() ([]string, error) {
		k, _, err := c.Children(path)
		return k, err
	})
}

func deleteNode(ctx context.Context, c *zk.Conn, path string) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, c.Delete(path, -1) })
	return err
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryable reports errors after which a request was certainly not applied
// and may simply be sent again (after a pause).
func retryable(err error) bool {
	return errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
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
