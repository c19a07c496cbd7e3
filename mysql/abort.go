package mysql

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// Cancelling a statement on a pinned connection without go-sql-driver's
// watcher.
//
// go-sql-driver honours a cancellable context by handing it to a watcher
// goroutine of the connection before each statement and taking it back
// after: two goroutine wake-ups per statement, in the reply's path. On a
// lock handed over from one pinned connection to another they cost the
// hand-off 60-80 µs of its 350-450 µs (the holder's ROLLBACK under a
// release deadline 40-50 µs, the waiter's wait under a cancellable
// context 20-30 µs; driver-level probe, Background against cancellable
// contexts, MariaDB on loopback, 400 hand-offs each, alternating).
//
// A connection the driver dialed itself (openURL's DialFunc) for a Pin or
// a one-statement Run (the version strategy's statements) is a netConn,
// which the statement's context can abort directly: the
// statement runs under a context that go-sql-driver does not watch
// (context.WithoutCancel: same values, no Done), and context.AfterFunc
// sets the connection's deadline in the past when the caller's context
// ends. The blocked read or write returns at once, as the watcher's
// close would make it; go-sql-driver then reports the connection broken,
// and the statement's error is the context's. A connection whose netConn
// is not known (a *sql.DB the user passed, one opened by database/sql's
// background opener or by a Ping) keeps go-sql-driver's watcher; Pin
// closes such a connection after its use, so that a later Pin dials one
// of its own. (pgx does the same since v5.6: its context watcher is a
// context.AfterFunc that cancels on the connection itself.)

// netConn is a connection dialed by the driver, which a context's end
// can abort.
type netConn struct {
	net.Conn
	aborted atomic.Bool
}

// longAgo is a deadline long past: a read or write blocked on the
// connection, or started after, fails at once.
var longAgo = time.Unix(1, 0)

// abort makes the connection's pending and later I/O fail.
func (n *netConn) abort() {
	n.aborted.Store(true)
	_ = n.Conn.SetDeadline(longAgo)
}

// errAborted is the error of a read or write that an abort failed.
var errAborted = errors.New("mysql: connection aborted: its statement's context ended")

// Read and Write say errAborted when an abort failed them, so that
// go-sql-driver's log line for it can be told apart (quietAborts). Once
// aborted they fail without trying: go-sql-driver sets a deadline of its
// own before each read or write when the URL sets readTimeout or
// writeTimeout, which would replace the abort's.
func (n *netConn) Read(b []byte) (int, error) {
	if n.aborted.Load() {
		return 0, errAborted
	}
	return n.outcome(n.Conn.Read(b))
}

func (n *netConn) Write(b []byte) (int, error) {
	if n.aborted.Load() {
		return 0, errAborted
	}
	return n.outcome(n.Conn.Write(b))
}

// outcome is a read's or write's result, its error errAborted when an
// abort failed it.
func (n *netConn) outcome(k int, err error) (int, error) {
	if err != nil && n.aborted.Load() {
		err = errAborted
	}
	return k, err
}

// quietAborts drops go-sql-driver's log line for an I/O that an abort
// failed: the caller's context ended, which its call reports already (the
// watcher's cancel logs nothing either).
type quietAborts struct{ gomysql.Logger }

func (q quietAborts) Print(v ...any) {
	for _, x := range v {
		if err, ok := x.(error); ok && errors.Is(err, errAborted) {
			return
		}
	}
	q.Logger.Print(v...)
}

// SyscallConn is the connection's own, for go-sql-driver's liveness check
// of a connection taken from the pool (it checks a syscall.Conn only).
func (n *netConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := n.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// dialSlot receives the netConn that a Pin's db.Conn dialed, if it
// dialed one (database/sql dials in the caller's goroutine, with its
// context, when the pool has no idle connection and room for one).
type dialSlot struct{ nc *netConn }

type dialSlotKey struct{}

// dial is openURL's DialFunc: it dials as go-sql-driver would (a
// net.Dialer, whose TCP keep-alive is on by default) and hands the
// connection to the Pin that asked for it, if any.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	nc := &netConn{Conn: c}
	if s, ok := ctx.Value(dialSlotKey{}).(*dialSlot); ok {
		s.nc = nc
	}
	return nc, nil
}

// unwatched returns the context to run a statement of c under, and a
// stop func to call when it returned, which reports whether ctx's end
// aborted the connection meanwhile (its result then does not count: the
// connection is broken and is discarded). Without a netConn, or for a
// context that cannot end, it is ctx itself (go-sql-driver watches it).
func (c *conn) unwatched(ctx context.Context) (context.Context, func() bool) {
	return unwatched(ctx, c.ses.nc)
}

// unwatched is conn.unwatched for a connection whose netConn is nc (nil:
// unknown).
func unwatched(ctx context.Context, nc *netConn) (context.Context, func() bool) {
	if nc == nil || ctx.Done() == nil || ctx.Err() != nil {
		return ctx, nil
	}
	stop := context.AfterFunc(ctx, nc.abort)
	return context.WithoutCancel(ctx), func() bool { return !stop() || nc.aborted.Load() }
}

// netOf returns the netConn of the driver connection key: dialed, the
// caller's slot says, by the call that took it (then recorded), or by an
// earlier one; nil when it is not known.
func (p *pool) netOf(key any, dialed *netConn) *netConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if dialed != nil {
		if p.nets == nil || len(p.nets) > 4*max(p.db.Stats().OpenConnections, 64) {
			p.nets = make(map[any]*netConn) // forget connections closed by database/sql
		}
		p.nets[key] = dialed
		return dialed
	}
	return p.nets[key]
}

// forgetNet drops the record of a discarded connection.
func (p *pool) forgetNet(key any) {
	p.mu.Lock()
	delete(p.nets, key)
	p.mu.Unlock()
}
