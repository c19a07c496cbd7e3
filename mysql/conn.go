package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// pool adapts a *sql.DB.
type pool struct {
	db    *sql.DB
	owned bool
	// multi: the DSN has multiStatements=true (and interpolateParams=true),
	// so a script is one round trip.
	multi bool
	log   *clientLog // the client's logger, when the driver made the DB

	mu  sync.Mutex
	ids map[any]sessionID // driver connection → its session
	// nets: driver connection → the netConn the driver dialed for it
	// (abort.go), for the connections dialed by a Pin or a Run.
	nets map[any]*netConn
}

// sessionID identifies a connection's session on the server: its
// CONNECTION_ID() and marker, the name of a user lock (GET_LOCK) that the
// session took when it was opened. Connection ids start again when the
// server restarts, so an id alone may name another client's session; the
// marker, unique to this session and gone with it (and with the server's
// restart), proves that a session is this one: IS_USED_LOCK(marker) is
// its id while it lives, NULL afterwards.
type sessionID struct {
	id     int64
	marker string // "" when the lock could not be taken
	// set are the arguments of the last sessionSQL that this session
	// ran, while its timeouts are still those (nil: unknown).
	set []any
	// nc is the connection when the driver dialed it for a Pin or a Run
	// (nil: unknown; see abort.go).
	nc *netConn
}

// newMarker returns a fresh marker: "dlock#conn#" and 32 hex digits, a
// name no lock name maps to (lockKey's hashed names are "dlock#" and hex
// digits only).
func newMarker() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "dlock#conn#" + hex.EncodeToString(b[:])
}

func (p *pool) Close() {
	if p.owned {
		p.db.Close()
	}
}

func (p *pool) MaxConns() int { return p.db.Stats().MaxOpenConnections }

// InUse is how many connections are taken out of the pool.
func (p *pool) InUse() int { return p.db.Stats().InUse }

// Run runs a script on a connection of its own: its statements share
// session variables and, for some, a transaction.
func (p *pool) Run(ctx context.Context, stmts []sqllock.Stmt, dest ...any) (bool, error) {
	if len(stmts) == 1 {
		return p.runOne(ctx, stmts[0], dest)
	}
	c, err := p.Pin(ctx)
	if err != nil {
		return false, err
	}
	found, err := c.Run(ctx, stmts, dest...)
	// A failed script may have left a transaction open: never reuse it.
	c.Release(err != nil)
	return found, err
}

// runOne runs one statement on a connection of the pool, unwatched by
// go-sql-driver when the driver dialed it (abort.go).
func (p *pool) runOne(ctx context.Context, s sqllock.Stmt, dest []any) (bool, error) {
	if !p.owned || ctx.Done() == nil {
		// Not our connections, or nothing to watch: the pool's own
		// call, which also retries a connection found broken.
		if handled, found, err := runTagged(ctx, p.db, s, dest); handled {
			return found, err
		}
		return scan(p.db.QueryRowContext(ctx, s.SQL, s.Args...), dest)
	}
	slot := new(dialSlot)
	sc, err := p.db.Conn(context.WithValue(ctx, dialSlotKey{}, slot))
	if err != nil {
		return false, err
	}
	var key any
	_ = sc.Raw(func(dc any) error { key = dc; return nil })
	sctx, aborted := unwatched(ctx, p.netOf(key, slot.nc))
	handled, found, err := runTagged(sctx, sc, s, dest)
	if !handled {
		found, err = scan(sc.QueryRowContext(sctx, s.SQL, s.Args...), dest)
	}
	if aborted != nil && aborted() {
		// ctx ended and broke the connection: whatever the statement
		// did, it is not known to have happened.
		found, err = false, ctx.Err()
		_ = sc.Raw(func(any) error { return driver.ErrBadConn })
		p.forgetNet(key)
	}
	_ = sc.Close()
	return found, err
}

func scan(row *sql.Row, dest []any) (bool, error) {
	err := row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Pin takes a connection and learns its CONNECTION_ID() (once per
// physical connection).
func (p *pool) Pin(ctx context.Context) (sqllock.Conn, error) {
	slot := new(dialSlot)
	sc, err := p.db.Conn(context.WithValue(ctx, dialSlotKey{}, slot))
	if err != nil {
		return nil, p.connErr(err)
	}
	c := &conn{p: p, c: sc}
	_ = sc.Raw(func(dc any) error { c.key = dc; return nil })
	p.mu.Lock()
	ses, ok := p.ids[c.key]
	p.mu.Unlock()
	nc := p.netOf(c.key, slot.nc)
	if !ok {
		var got sql.NullInt64
		ses.nc = nc
		ses.marker = newMarker()
		if err := sc.QueryRowContext(ctx, "SELECT CONNECTION_ID(), GET_LOCK(?, 0)", ses.marker).Scan(&ses.id, &got); err != nil {
			c.Release(true)
			return nil, err
		}
		if got.Int64 != 1 {
			ses.marker = ""
		}
		if ses.nc == nil && p.owned {
			// A connection of this pool that database/sql dialed for
			// another use: its statements would be watched by
			// go-sql-driver (abort.go). It serves this Pin, then
			// closes, so that a later Pin dials one of its own.
			c.broken = true
		} else {
			p.mu.Lock()
			if p.ids == nil || len(p.ids) > 4*max(p.db.Stats().OpenConnections, 64) {
				p.ids = make(map[any]sessionID) // forget connections closed by database/sql
			}
			p.ids[c.key] = ses
			p.mu.Unlock()
		}
	}
	c.ses = ses
	return c, nil
}

// connErr says why a connection could not be opened when the server
// refused it for its max_connections (ER_CON_COUNT_ERROR): every held
// forupdate lease keeps a connection of its own, so a Locker holding as
// many leases as the server allows connections gets no more, however
// large its pool.
func (p *pool) connErr(err error) error {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1040 {
		return err
	}
	return fmt.Errorf("the server refused a connection beyond its max_connections (%d open from this pool; each held forupdate lease keeps one of its own: raise max_connections, or hold many leases at once with strategy getlock, whose leases share connections): %w",
		p.db.Stats().OpenConnections, err)
}

// conn is a pinned connection.
type conn struct {
	p   *pool
	c   *sql.Conn
	key any
	ses sessionID

	released bool
	broken   bool // aborted by a context's end, or not dialed by this pool's Pin or Run: never back to the pool
}

func (c *conn) Session() int64 { return c.ses.id }

// Run sends the script as one multi-statement when the DSN allows it,
// statement by statement otherwise.
func (c *conn) Run(ctx context.Context, stmts []sqllock.Stmt, dest ...any) (bool, error) {
	stmts = c.settings(stmts)
	sctx, aborted := c.unwatched(ctx)
	found, err := c.run(sctx, stmts, dest)
	if aborted != nil && aborted() {
		// ctx ended and broke the connection: whatever the statement
		// did, its session is gone with it (see abort.go).
		c.broken = true
		found, err = false, ctx.Err()
	}
	if err != nil {
		c.ses.set = nil // the session's state is unknown
	}
	return found, err
}

// settings makes the session's timeouts a setting per connection on a
// pool the driver owns: sessionSQL is skipped when the session has its
// values already, and so is leaseRestore while they are known.
// Any other statement that sets a SESSION variable makes them unknown.
func (c *conn) settings(stmts []sqllock.Stmt) []sqllock.Stmt {
	out := make([]sqllock.Stmt, 0, len(stmts))
	for _, s := range stmts {
		switch {
		case s.SQL == sessionSQL:
			if c.p.owned && slices.Equal(c.ses.set, s.Args) {
				continue
			}
			c.ses.set = s.Args
		case s.SQL == leaseRestoreSQL:
			if c.p.owned && c.ses.set != nil {
				continue
			}
			c.ses.set = nil
		case strings.Contains(s.SQL, "SESSION"):
			c.ses.set = nil
		}
		out = append(out, s)
	}
	return out
}

func (c *conn) run(ctx context.Context, stmts []sqllock.Stmt, dest []any) (bool, error) {
	if handled, found, err := runOK(ctx, c.c, c.p.multi, stmts, dest); handled {
		return found, err
	}
	if c.p.multi && len(stmts) > 1 {
		var b strings.Builder
		var args []any
		for i, s := range stmts {
			if i > 0 {
				b.WriteString(";\n")
			}
			b.WriteString(s.SQL)
			args = append(args, s.Args...)
		}
		return c.query(ctx, b.String(), args, dest)
	}
	for _, s := range stmts[:len(stmts)-1] {
		if _, err := c.c.ExecContext(ctx, s.SQL, s.Args...); err != nil {
			return false, err
		}
	}
	last := stmts[len(stmts)-1]
	return c.query(ctx, last.SQL, last.Args, dest)
}

// query reads the first row of the last result set that has columns.
func (c *conn) query(ctx context.Context, q string, args, dest []any) (bool, error) {
	rows, err := c.c.QueryContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	found := false
	for {
		found = false
		if rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return false, err
			}
			found = true
			for rows.Next() {
			}
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	return found, rows.Close()
}

// Abandon closes the connection and kills its session on the server
// (from another connection). Closing frees the pool's slot first, so the
// KILL never waits for the connections that queue behind this one's lock;
// an idle session notices the close at once, and the KILL ends one still
// waiting for a row lock or in GET_LOCK, which would otherwise wait on
// after the client gave up. The KILL names the session by its marker
// (KILL IS_USED_LOCK(marker)), never by its id alone: after a restart of
// the server the old id may belong to another client, whose session must
// not be ended; the marker lock died with the old server, so nothing is
// killed then (the session died with it too).
func (c *conn) Abandon(ctx context.Context) {
	c.Release(true)
	if c.ses.marker == "" {
		return // not provably this session: no KILL
	}
	kctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	_, _ = c.p.db.ExecContext(kctx, "KILL IS_USED_LOCK(?)", c.ses.marker)
}

// killTimeout bounds Abandon's KILL.
const killTimeout = 2 * time.Second

// Release returns the connection, or has database/sql close it. Only the
// first call counts.
func (c *conn) Release(discard bool) {
	if c.released {
		return
	}
	c.released = true
	discard = discard || c.broken
	if !discard {
		c.p.mu.Lock()
		if ses, ok := c.p.ids[c.key]; ok && ses.id == c.ses.id {
			c.p.ids[c.key] = c.ses // the session's settings, for its next pin
		}
		c.p.mu.Unlock()
	}
	if discard {
		_ = c.c.Raw(func(any) error { return driver.ErrBadConn })
		c.p.mu.Lock()
		delete(c.p.ids, c.key)
		delete(c.p.nets, c.key)
		c.p.mu.Unlock()
	}
	_ = c.c.Close()
}
