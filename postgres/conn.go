package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// runner is what pgxpool.Pool and pgxpool.Conn share.
type runner interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// run sends a script: one statement as one query, several as one batch
// (a pipeline: one round trip). The last statement's first row is
// scanned into dest.
func run(ctx context.Context, q runner, stmts []sqllock.Stmt, dest []any) (bool, error) {
	if len(stmts) == 1 {
		return scan(q.QueryRow(ctx, stmts[0].SQL, stmts[0].Args...), dest)
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
	found, err := scan(br.QueryRow(), dest)
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
	return &conn{c: c}, nil
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
type conn struct{ c *pgxpool.Conn }

func (c *conn) Run(ctx context.Context, stmts []sqllock.Stmt, dest ...any) (bool, error) {
	return run(ctx, c.c, stmts, dest)
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
