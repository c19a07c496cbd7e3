package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// runner is what pgxpool.Pool and pgxpool.Conn share.
type runner interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// run sends a script: one statement as one query, several as one batch
// (a pipeline: one round trip). The last statement's first row is
// scanned into dest; a last statement tagged sqllock.ChangedTag is
// executed instead, and answers (TRUE) when its command tag counts a row.
func run(ctx context.Context, q runner, stmts []sqllock.Stmt, dest []any) (bool, error) {
	last := stmts[len(stmts)-1]
	changed := strings.HasPrefix(last.SQL, sqllock.ChangedTag)
	if len(stmts) == 1 {
		if changed {
			tag, err := q.Exec(ctx, last.SQL, last.Args...)
			return answerChanged(tag, err, dest)
		}
		return scan(q.QueryRow(ctx, last.SQL, last.Args...), dest)
	}
	b := &pgx.Batch{}
	for _, s := range stmts {
		b.Queue(s.SQL, s.Args...)
	}
	br := q.SendBatch(ctx, b)
	for range stmts[:len(stmts)-1] {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return false, err
		}
	}
	var (
		found bool
		err   error
	)
	if changed {
		tag, eerr := br.Exec()
		found, err = answerChanged(tag, eerr, dest)
	} else {
		found, err = scan(br.QueryRow(), dest)
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		return false, cerr
	}
	return found, err
}

func scan(row pgx.Row, dest []any) (bool, error) {
	err := row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// answerChanged is the answer of a statement tagged sqllock.ChangedTag:
// one row, (TRUE), when it changed a row; no row otherwise.
func answerChanged(tag pgconn.CommandTag, err error, dest []any) (bool, error) {
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	switch {
	case len(dest) == 0:
	case len(dest) > 1:
		return false, fmt.Errorf("postgres: %d values to scan, a changed-rows answer has 1", len(dest))
	default:
		switch d := dest[0].(type) {
		case *bool:
			*d = true
		case *any:
			*d = true
		default:
			return false, fmt.Errorf("postgres: cannot scan a changed-rows answer into %T", d)
		}
	}
	return true, nil
}

// pool adapts a pgxpool.Pool.
type pool struct {
	p     *pgxpool.Pool
	owned bool
	// maxConns is the pool's size, read once: pgxpool's Config returns
	// a deep copy of the configuration (its maps, its TLS settings), and
	// the core asks for the size on every shared release.
	maxConns int
}

func newPool(p *pgxpool.Pool, owned bool) *pool {
	return &pool{p: p, owned: owned, maxConns: int(p.Config().MaxConns)}
}

func (p *pool) Run(ctx context.Context, stmts []sqllock.Stmt, dest ...any) (bool, error) {
	return run(ctx, p.p, stmts, dest)
}

func (p *pool) Pin(ctx context.Context) (sqllock.Conn, error) {
	c, err := p.p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, owned: p.owned}, nil
}

func (p *pool) Close() {
	if p.owned {
		p.p.Close()
	}
}

func (p *pool) MaxConns() int { return p.maxConns }

// InUse is how many connections are taken out of the pool.
func (p *pool) InUse() int { return int(p.p.Stat().AcquiredConns()) }

// Listen opens a dedicated connection (taken out of the pool for good)
// that LISTENs on channels.
func (p *pool) Listen(ctx context.Context, channels ...string) (sqllock.Listening, error) {
	c, err := p.p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	pc := c.Hijack()
	for _, ch := range channels {
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			pc.Close(context.Background())
			return nil, err
		}
	}
	return &listening{c: pc}, nil
}

type listening struct{ c *pgx.Conn }

func (l *listening) Next(ctx context.Context) (channel, payload string, err error) {
	n, err := l.c.WaitForNotification(ctx)
	if err != nil {
		return "", "", err
	}
	return n.Channel, n.Payload, nil
}

func (l *listening) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	l.c.Close(ctx)
}

// conn is a pinned pool connection.
type conn struct {
	c *pgxpool.Conn
	// owned: the connection is the driver's own, whose session settings
	// it may change (sessionSettings).
	owned bool
	// set is what the grant on this connection set for its transaction
	// alone, for the release to make the session's.
	set settings
}

// settings are a session's idle_in_transaction_session_timeout and
// lock_timeout, each a count of milliseconds as text ("": not known).
type settings struct{ idle, wait string }

// The keys, in a connection's CustomData, of the settings its session has
// (sessionSettings).
const (
	sessionIdleKey = "dlock.idle"
	sessionWaitKey = "dlock.lock_timeout"
)

func (c *conn) Run(ctx context.Context, stmts []sqllock.Stmt, dest ...any) (bool, error) {
	stmts, set := c.sessionSettings(stmts)
	found, err := run(ctx, c.c, stmts, dest)
	data := c.c.Conn().PgConn().CustomData()
	if err != nil {
		// Whatever the session has now, the next grant sets its own.
		delete(data, sessionIdleKey)
		delete(data, sessionWaitKey)
		c.set = settings{}
		return found, err
	}
	if set.idle != "" {
		data[sessionIdleKey] = set.idle
	}
	if set.wait != "" {
		data[sessionWaitKey] = set.wait
	}
	return found, err
}

// sessionSettings spares a forupdate grant on the driver's own
// connections the settings that its session has already (each a cost of
// the server's per grant; together some 5 µs of a grant's 170):
//
//   - the idle timeout, when the session's own
//     idle_in_transaction_session_timeout is the TTL;
//   - a wait's lock_timeout, when the session's own lock_timeout serves
//     the wait (waitServes: no more than the wait, and more than half of
//     it).
//
// Such a grant runs the variant of its query that leaves those settings
// out (grantVariants). A grant that sets one for its transaction, as on a
// user's pool, has its release, a ROLLBACK alone, make it the session's
// with a SET after the ROLLBACK, in the same round trip (a SET inside the
// lease's transaction would be rolled back with it): the idle timeout as
// it is, the lock_timeout as sessionWait makes it (unless that is too
// short to keep). set is what the
// returned script gives the session when it succeeds (zero: nothing).
//
// A session's idle timeout is never less than the TTL of a grant that
// relies on it: it is the same value, or the grant sets its own. A wait
// that relies on the session's lock_timeout is never ended after its
// deadline; it may end before it (at the session's value, at most half
// the wait early), and the Locker then waits again for the rest, with the
// rest as the grant's own lock_timeout.
func (c *conn) sessionSettings(stmts []sqllock.Stmt) (out []sqllock.Stmt, set settings) {
	if !c.owned || len(stmts) == 0 {
		return stmts, settings{}
	}
	last := stmts[len(stmts)-1]
	if len(stmts) == 1 && last.SQL == "ROLLBACK" && c.set != (settings{}) {
		set, c.set = c.set, settings{}
		out = []sqllock.Stmt{last}
		if set.idle != "" {
			out = append(out, sqllock.S("SET idle_in_transaction_session_timeout = "+set.idle))
		}
		if set.wait != "" {
			out = append(out, sqllock.S("SET lock_timeout = "+set.wait))
		}
		return out, set
	}
	found, ok := grantVariantsOf.Load(last.SQL)
	if !ok {
		return stmts, settings{}
	}
	v := found.(*grantVariants)
	ttl, wait := argMillis(last.Args, 1), int64(0)
	if v.wait {
		wait = argMillis(last.Args, 2)
	}
	if ttl < 0 || wait < 0 {
		return stmts, settings{} // not a count of milliseconds: never put in a SET
	}
	data := c.c.Conn().PgConn().CustomData()
	skip := 0
	if have, _ := data[sessionIdleKey].(string); have == last.Args[1] {
		skip |= skipIdle
	} else {
		c.set.idle = last.Args[1].(string)
	}
	if v.wait {
		if have, ok := data[sessionWaitKey].(string); ok && waitServes(have, wait) {
			skip |= skipWait
		} else if w := sessionWait(wait); w != "" {
			c.set.wait = w
		}
	}
	if skip == 0 {
		return stmts, settings{}
	}
	args := slices.Clone(last.Args)
	if skip&skipWait != 0 {
		args = slices.Delete(args, 2, 3)
	}
	if skip&skipIdle != 0 {
		args = slices.Delete(args, 1, 2)
	}
	out = slices.Clone(stmts)
	out[len(out)-1] = sqllock.Stmt{SQL: v.q[skip], Args: args}
	return out, settings{}
}

// argMillis is args[i], a count of milliseconds as text, or -1 when it
// is none (missing, not text, not a decimal count).
func argMillis(args []any, i int) int64 {
	if i >= len(args) {
		return -1
	}
	s, _ := args[i].(string)
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return -1
	}
	return int64(n)
}

// waitServes reports whether a session whose lock_timeout is have (as
// sessionWait made it) may run a wait of wait milliseconds (0: no bound)
// without setting its own: for no bound, a session without one; else a
// bound no later than the wait's and more than half of it, so that the
// server never ends the wait after its deadline and ends it early (the
// Locker then waits again for the rest) only after more than half of it.
func waitServes(have string, wait int64) bool {
	h, err := strconv.ParseInt(have, 10, 64)
	if err != nil {
		return false
	}
	if wait == 0 {
		return h == 0
	}
	return h > 0 && h <= wait && 2*h > wait
}

// sessionWait is the lock_timeout that a release gives its session after
// a grant whose wait was wait milliseconds: the largest power of two no
// greater than it (0 for 0), which serves every later wait from that value
// to just under twice it. The waits of one application tend to share
// their bound (a request's deadline, a job's timeout), and one value
// serves them all. A value under minSessionWait is not given ("": the
// session keeps its own): the session's lock_timeout also bounds the
// brief waits of statements that set none (a semaphore's header row), and
// those must not fail for a short wait that happened to come first.
func sessionWait(wait int64) string {
	if wait == 0 {
		return "0"
	}
	if p := int64(1) << (bits.Len64(uint64(wait)) - 1); p >= minSessionWait {
		return strconv.FormatInt(p, 10)
	}
	return ""
}

// minSessionWait is the least lock_timeout, in milliseconds, that a
// release gives its session (sessionWait).
const minSessionWait = 1024

func (c *conn) Session() int64 { return int64(c.c.Conn().PgConn().PID()) }

// Abandon sends a cancel request (on its own connection, with the
// backend's secret key: it can only reach this backend) to stop a lock
// wait, and closes the connection: the backend then reads EOF and ends,
// which rolls back its transaction and frees its locks.
func (c *conn) Abandon(ctx context.Context) {
	pc := c.c.Conn().PgConn()
	_ = pc.CancelRequest(ctx)
	_ = pc.Close(ctx)
}

// Release returns the connection; pgxpool destroys a closed connection
// or one left inside a transaction.
func (c *conn) Release(discard bool) {
	if discard && !c.c.Conn().IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		_ = c.c.Conn().Close(ctx)
		cancel()
	}
	c.c.Release()
}
