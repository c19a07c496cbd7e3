package postgres

import (
	"context"
	"errors"
	"fmt"
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
	// it may change (sessionIdle).
	owned bool
	// idle is the idle_in_transaction_session_timeout that the grant on
	// this connection set for its transaction alone, for the release to
	// make the session's ("": none).
	idle string
}

// sessionIdleKey keys, in a connection's CustomData, the
// idle_in_transaction_session_timeout its session has (sessionIdle).
const sessionIdleKey = "dlock.idle"

func (c *conn) Run(ctx context.Context, stmts []sqllock.Stmt, dest ...any) (bool, error) {
	stmts, set := c.sessionIdle(stmts)
	found, err := run(ctx, c.c, stmts, dest)
	data := c.c.Conn().PgConn().CustomData()
	switch {
	case err != nil:
		// Whatever the session has now, the next grant sets its own.
		delete(data, sessionIdleKey)
		c.idle = ""
	case set != "":
		data[sessionIdleKey] = set
	}
	return found, err
}

// sessionIdle spares a forupdate grant on the driver's own connections
// the setting of its idle timeout (a cost of the server's per grant):
// a session whose own idle_in_transaction_session_timeout is the TTL
// already (set by an earlier release) runs the grant's variant that sets
// nothing (without the timeout's argument); any other grant sets it for
// its transaction, as on a user's pool, and its release, a ROLLBACK
// alone, then makes it the session's with a SET after the ROLLBACK, in
// the same round trip (a SET inside the lease's transaction would be
// rolled back with it). set is the value the returned script gives the
// session when it succeeds ("": none). A session's value is never less
// than the TTL of a grant that relies on it: it is the same value, or the
// grant sets its own.
func (c *conn) sessionIdle(stmts []sqllock.Stmt) (out []sqllock.Stmt, set string) {
	if !c.owned || len(stmts) == 0 {
		return stmts, ""
	}
	last := stmts[len(stmts)-1]
	if len(stmts) == 1 && last.SQL == "ROLLBACK" && c.idle != "" {
		set, c.idle = c.idle, ""
		return []sqllock.Stmt{last, sqllock.S("SET idle_in_transaction_session_timeout = " + set)}, set
	}
	variant, ok := idleSet.Load(last.SQL)
	if !ok || len(last.Args) < 2 {
		return stmts, ""
	}
	ttl, _ := last.Args[1].(string)
	if _, err := strconv.ParseUint(ttl, 10, 63); err != nil {
		return stmts, "" // not a count of milliseconds: never put in a SET
	}
	if have, _ := c.c.Conn().PgConn().CustomData()[sessionIdleKey].(string); have == ttl {
		out = slices.Clone(stmts)
		out[len(out)-1] = sqllock.Stmt{SQL: variant.(string), Args: slices.Delete(slices.Clone(last.Args), 1, 2)}
		return out, ""
	}
	c.idle = ttl
	return stmts, ""
}

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
