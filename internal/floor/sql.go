package floor

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The tables of the SQL floors: rowTable's rows are locked by the
// forupdate floors, leaseTable's rows are the version floors' leases,
// fenceTable's (MySQL) and fenceSeq (PostgreSQL) the tokens of the
// forupdate and native floors. (The first two names are dlockbench's from
// before the floors moved here, so that a server it ran on keeps its
// tables.)
const (
	rowTable   = "dlockbench_floor"
	leaseTable = "dlockbench_lease"
	fenceTable = "dlockbench_fence"
	fenceSeq   = "dlockbench_fence_seq"
)

// SQLConn is one connection to PostgreSQL or MySQL, pinned for as long
// as it is open, with the dialect of the SQL floors' statements.
type SQLConn struct {
	// exec runs one statement and returns the rows it affected; multi
	// sends several statements in one round trip.
	exec  func(ctx context.Context, query string, args ...any) (int64, error)
	multi func(ctx context.Context, query string, args ...any) error
	// value runs a query returning one integer (0 for NULL); text one
	// string.
	value func(ctx context.Context, query string, args ...any) (int64, error)
	text  func(ctx context.Context, query string) (string, error)
	// token runs a statement (or, on MySQL, a batch) that issues a token:
	// PostgreSQL's returns it as its one row, MySQL's last statement as
	// LAST_INSERT_ID(expr) of the one row it updates. ok is false when it
	// issued none (no row, no row updated).
	token func(ctx context.Context, query string, args ...any) (token uint64, ok bool, err error)
	close func() error
	// busy reports an error of a NOWAIT row lock that found the row
	// locked.
	busy func(error) bool
	d    *dialect
}

// dialect is what the SQL floors send, in a server's SQL.
type dialect struct {
	rowDDL, hasRow, insertRow string // forupdate: arg name
	// lockRow sends BEGIN with the row lock and the idle timeout that ends
	// a hung holder's transaction; args name, idle(ttl). freeRow commits
	// (and resets the timeout).
	lockRow, freeRow   string
	leaseDDL, hasLease string // version: arg name
	insertLease        string
	// takeLease: args (ttl µs, owner, name), issues the version as token;
	// freeLease: args (owner, name).
	takeLease, freeLease string
	// fenceDDL creates the token counter; hasFence and insertFence (arg
	// name) its row of a name, when it has rows; nextFence (arg name)
	// issues a token on a connection of its own.
	fenceDDL, hasFence, insertFence, nextFence string
	// lockNative takes the native lock and its token (args nativeArgs);
	// unlockNative (arg key) returns 1 when it freed it.
	lockNative, unlockNative string
	nativeArgs               func(name string, ttl time.Duration) []any
	nativeKey                func(name string) any
	// idle is the server's idle timeout for a lease of ttl, in its unit.
	idle func(ttl time.Duration) any
}

// pgIdle is a PostgreSQL idle timeout: whole milliseconds, as text.
func pgIdle(ttl time.Duration) any { return strconv.FormatInt(max(ttl.Milliseconds(), 1), 10) }

// myIdle is MySQL's wait_timeout: whole seconds, rounded up.
func myIdle(ttl time.Duration) any { return int64(max((ttl+time.Second-1)/time.Second, 1)) }

var postgres = &dialect{
	rowDDL:    "CREATE TABLE IF NOT EXISTS " + rowTable + " (name text PRIMARY KEY)",
	hasRow:    "SELECT count(*) FROM " + rowTable + " WHERE name = $1",
	insertRow: "INSERT INTO " + rowTable + " (name) VALUES ($1) ON CONFLICT DO NOTHING",
	// The timeout is local to the transaction: COMMIT ends it.
	lockRow:     "BEGIN; SELECT set_config('idle_in_transaction_session_timeout', $2, true) FROM " + rowTable + " WHERE name = $1 FOR UPDATE NOWAIT",
	freeRow:     "COMMIT",
	leaseDDL:    "CREATE TABLE IF NOT EXISTS " + leaseTable + " (name text PRIMARY KEY, owner text, expires timestamptz, version bigint NOT NULL DEFAULT 0)",
	hasLease:    "SELECT count(*) FROM " + leaseTable + " WHERE name = $1",
	insertLease: "INSERT INTO " + leaseTable + " (name) VALUES ($1) ON CONFLICT DO NOTHING",
	takeLease: "UPDATE " + leaseTable + " SET expires = now() + $1::bigint * interval '1 microsecond', owner = $2, version = version + 1" +
		" WHERE name = $3 AND (owner IS NULL OR expires <= now()) RETURNING version",
	freeLease: "UPDATE " + leaseTable + " SET owner = NULL WHERE owner = $1 AND name = $2 AND expires > now()",
	// A sequence: nextval is never rolled back, and the commit of the
	// transaction that took it flushes it (nextval gives the transaction
	// an id, so that its commit is logged and flushed).
	fenceDDL:  "CREATE SEQUENCE IF NOT EXISTS " + fenceSeq,
	nextFence: "SELECT nextval('" + fenceSeq + "')",
	// The subquery's WHERE takes the lock; only then are the session's
	// idle timeout set and the token taken, all in one implicit
	// transaction. OFFSET 0 keeps the subquery from being merged.
	lockNative: "SELECT nextval('" + fenceSeq + "') FROM (SELECT set_config('idle_session_timeout', $2, false)" +
		" WHERE pg_try_advisory_lock($1) OFFSET 0) g",
	unlockNative: "SELECT pg_advisory_unlock($1)::int::bigint FROM set_config('idle_session_timeout', '0', false) s",
	nativeArgs:   func(name string, ttl time.Duration) []any { return []any{advisoryKey(keyPrefix + name), pgIdle(ttl)} },
	nativeKey:    func(name string) any { return advisoryKey(keyPrefix + name) },
	idle:         pgIdle,
}

var mySQL = &dialect{
	rowDDL:    "CREATE TABLE IF NOT EXISTS " + rowTable + " (name VARCHAR(191) PRIMARY KEY) ENGINE=InnoDB",
	hasRow:    "SELECT COUNT(*) FROM " + rowTable + " WHERE name = ?",
	insertRow: "INSERT IGNORE INTO " + rowTable + " (name) VALUES (?)",
	// A batch stops at its first error: the timeout is set only once the
	// row is locked. It is the session's: freeRow puts it back.
	lockRow:     "BEGIN; SELECT 1 FROM " + rowTable + " WHERE name = ? FOR UPDATE NOWAIT; SET SESSION wait_timeout = ?",
	freeRow:     "COMMIT; SET SESSION wait_timeout = DEFAULT",
	leaseDDL:    "CREATE TABLE IF NOT EXISTS " + leaseTable + " (name VARCHAR(191) PRIMARY KEY, owner VARCHAR(64), expires DATETIME(6), version BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
	hasLease:    "SELECT COUNT(*) FROM " + leaseTable + " WHERE name = ?",
	insertLease: "INSERT IGNORE INTO " + leaseTable + " (name) VALUES (?)",
	takeLease: "UPDATE " + leaseTable + " SET expires = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, owner = ?, version = LAST_INSERT_ID(version + 1)" +
		" WHERE name = ? AND (owner IS NULL OR expires <= UTC_TIMESTAMP(6))",
	freeLease: "UPDATE " + leaseTable + " SET owner = NULL WHERE owner = ? AND name = ? AND expires > UTC_TIMESTAMP(6)",
	// A counter row per name, bumped in an autocommitted UPDATE: durable
	// when it returns (as innodb_flush_log_at_trx_commit makes every
	// commit).
	fenceDDL:    "CREATE TABLE IF NOT EXISTS " + fenceTable + " (name VARCHAR(191) PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
	hasFence:    "SELECT COUNT(*) FROM " + fenceTable + " WHERE name = ?",
	insertFence: "INSERT IGNORE INTO " + fenceTable + " (name) VALUES (?)",
	nextFence:   "UPDATE " + fenceTable + " SET fence = LAST_INSERT_ID(fence + 1) WHERE name = ?",
	// Only the holder of GET_LOCK writes the name's counter row, so the
	// UPDATE never waits.
	lockNative: "SET @dlockfloor_g = GET_LOCK(?, 0); SET SESSION wait_timeout = IF(@dlockfloor_g = 1, ?, @@SESSION.wait_timeout);" +
		" UPDATE " + fenceTable + " SET fence = LAST_INSERT_ID(fence + 1) WHERE name = ? AND @dlockfloor_g = 1",
	unlockNative: "SELECT RELEASE_LOCK(?); SET SESSION wait_timeout = DEFAULT",
	nativeArgs: func(name string, ttl time.Duration) []any {
		return []any{getLockKey(keyPrefix + name), myIdle(ttl), name}
	},
	nativeKey: func(name string) any { return getLockKey(keyPrefix + name) },
	idle:      myIdle,
}

// DialSQL opens one connection to the PostgreSQL or MySQL server of
// rawURL.
func DialSQL(ctx context.Context, rawURL string) (*SQLConn, error) {
	backend, err := backendOf(rawURL)
	if err != nil {
		return nil, err
	}
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	pw, _ := u.User.Password()
	if backend == "postgres" {
		c, err := pgConn(ctx, rawURL)
		return c, scrub(err, pw)
	}
	if backend == "mysql" {
		c, err := myConn(ctx, rawURL)
		return c, scrub(err, pw)
	}
	return nil, fmt.Errorf("floor: %s is not a SQL server", backend)
}

// Text runs a query returning one string (a server setting).
func (c *SQLConn) Text(ctx context.Context, query string) (string, error) { return c.text(ctx, query) }

// Close closes the connection.
func (c *SQLConn) Close() error { return c.close() }

func pgConn(ctx context.Context, rawURL string) (*SQLConn, error) {
	c, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("floor: postgres: %w", err)
	}
	return &SQLConn{
		exec: func(ctx context.Context, q string, args ...any) (int64, error) {
			tag, err := c.Exec(ctx, q, args...)
			return tag.RowsAffected(), err
		},
		multi: func(ctx context.Context, q string, args ...any) error {
			// The simple protocol carries several statements in one message.
			_, err := c.Exec(ctx, q, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
			return err
		},
		value: func(ctx context.Context, q string, args ...any) (int64, error) {
			var v *int64
			err := c.QueryRow(ctx, q, args...).Scan(&v)
			if v == nil {
				return 0, err
			}
			return *v, err
		},
		text: func(ctx context.Context, q string) (v string, err error) {
			err = c.QueryRow(ctx, q).Scan(&v)
			return v, err
		},
		token: func(ctx context.Context, q string, args ...any) (uint64, bool, error) {
			var v *int64
			err := c.QueryRow(ctx, q, args...).Scan(&v)
			if errors.Is(err, pgx.ErrNoRows) {
				return 0, false, nil
			}
			if err != nil || v == nil {
				return 0, false, err
			}
			return uint64(*v), true, nil
		},
		close: func() error { return c.Close(context.Background()) },
		busy: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "55P03" // lock_not_available
		},
		d: postgres,
	}, nil
}

// myConn opens one pinned connection from a mysql://user:password@host/db
// URL, with the settings that save round trips: parameters interpolated
// by the client, several statements per request.
func myConn(ctx context.Context, rawURL string) (*SQLConn, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", u.Host
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	cfg.InterpolateParams = true
	cfg.MultiStatements = true
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("floor: mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(1)
	c, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("floor: mysql: %w", err)
	}
	exec := func(ctx context.Context, q string, args ...any) (int64, error) {
		res, err := c.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	return &SQLConn{
		exec: exec,
		multi: func(ctx context.Context, q string, args ...any) error {
			_, err := exec(ctx, q, args...)
			return err
		},
		value: func(ctx context.Context, q string, args ...any) (int64, error) {
			var v sql.NullInt64
			err := c.QueryRowContext(ctx, q, args...).Scan(&v)
			return v.Int64, err
		},
		text: func(ctx context.Context, q string) (v string, err error) {
			err = c.QueryRowContext(ctx, q).Scan(&v)
			return v, err
		},
		token: func(ctx context.Context, q string, args ...any) (uint64, bool, error) {
			res, err := c.ExecContext(ctx, q, args...)
			if err != nil {
				return 0, false, err
			}
			// The last statement's figures (go-sql-driver's Result).
			n, err := res.RowsAffected()
			if err != nil || n != 1 {
				return 0, false, err
			}
			id, err := res.LastInsertId()
			return uint64(id), err == nil, err
		},
		close: func() error { c.Close(); return db.Close() },
		busy: func(err error) bool {
			var me *mysql.MySQLError
			// MySQL: ER_LOCK_NOWAIT; MariaDB: ER_LOCK_WAIT_TIMEOUT.
			return errors.As(err, &me) && (me.Number == 3572 || me.Number == 1205)
		},
		d: mySQL,
	}, nil
}

func sqlRTT(ctx context.Context, rawURL string) (*RTT, error) {
	c, err := DialSQL(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	return &RTT{do: func(ctx context.Context) error { _, err := c.exec(ctx, "SELECT 1"); return err }, close: c.close}, nil
}

// sqlFloor opens a SQL floor: setup prepares the server once per
// connection (and may open more, closed with c); the attempt it returns
// is the floor's.
func sqlFloor(setup func(ctx context.Context, rawURL string, c *SQLConn, ttl time.Duration) (try func(ctx context.Context, name string) (*Grant, bool, error), err error)) func(context.Context, string, time.Duration) (*Lock, error) {
	return func(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error) {
		c, err := DialSQL(ctx, rawURL)
		if err != nil {
			return nil, err
		}
		try, err := setup(ctx, rawURL, c, ttl)
		if err != nil {
			c.close()
			return nil, err
		}
		return &Lock{try: try, close: c.close}, nil
	}
}

// row is a table's row of a name: how to look for it and to insert it.
type row struct{ has, insert string }

// ensured makes sure once per connection that a name has its rows,
// outside the steady state of a benchmark, then makes the attempt. A row
// is looked for by a read that takes no lock before it is inserted: on
// MySQL, an INSERT IGNORE of a row another holder has locked would wait
// for that holder.
func ensured(c *SQLConn, rows []row, try func(ctx context.Context, name string) (*Grant, bool, error)) func(ctx context.Context, name string) (*Grant, bool, error) {
	seen := map[string]bool{}
	return func(ctx context.Context, name string) (*Grant, bool, error) {
		if !seen[name] {
			for _, r := range rows {
				if r.has == "" {
					continue
				}
				n, err := c.value(ctx, r.has, name)
				if err == nil && n == 0 {
					_, err = c.exec(ctx, r.insert, name)
				}
				if err != nil {
					return nil, false, err
				}
			}
			seen[name] = true
		}
		return try(ctx, name)
	}
}

// forUpdate: BEGIN, the idle timeout and SELECT … FOR UPDATE NOWAIT sent
// together (one round trip), the transaction left open on the pinned
// connection while the lock is held, COMMIT to free. A row found locked
// rolls back. The token cannot be taken in that transaction (a crash of
// the server would roll it back, and the next holder would be given it
// again): it is taken once the row is locked, on a second connection
// whose autocommit makes it durable before it is returned.
func forUpdate(ctx context.Context, rawURL string, c *SQLConn, ttl time.Duration) (func(context.Context, string) (*Grant, bool, error), error) {
	fc, err := DialSQL(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	closeLock := c.close
	c.close = func() error { return errors.Join(fc.close(), closeLock()) }
	// Concurrent CREATE … IF NOT EXISTS can collide on the catalog: the
	// loser's error is ignored and the INSERT tells.
	_, _ = c.exec(ctx, c.d.rowDDL)
	_, _ = c.exec(ctx, c.d.fenceDDL)
	idle := c.d.idle(ttl)
	free := func(ctx context.Context) error { return c.multi(ctx, c.d.freeRow) }
	rows := []row{{c.d.hasRow, c.d.insertRow}, {c.d.hasFence, c.d.insertFence}}
	return ensured(c, rows, func(ctx context.Context, name string) (*Grant, bool, error) {
		if err := c.multi(ctx, c.d.lockRow, name, idle); err != nil {
			_, rbErr := c.exec(ctx, "ROLLBACK")
			if c.busy(err) {
				return nil, false, rbErr
			}
			return nil, false, err
		}
		token, ok, err := fc.token(ctx, c.d.nextFence, fenceArgs(c.d, name)...)
		if err == nil && !ok {
			err = fmt.Errorf("floor: no token for %q", name)
		}
		if err != nil {
			return nil, false, errors.Join(err, free(ctx))
		}
		return &Grant{token: token, release: free}, true, nil
	}), nil
}

// fenceArgs are nextFence's arguments: the name where tokens are counted
// per name.
func fenceArgs(d *dialect, name string) []any {
	if d.hasFence == "" {
		return nil
	}
	return []any{name}
}

// version: a lease row taken by one conditional UPDATE when it is free
// or expired by the server's clock, its version moved on and returned as
// the token, freed by another conditional on the owner and on the lease
// not having expired. No connection is held in between.
func version(ctx context.Context, _ string, c *SQLConn, ttl time.Duration) (func(context.Context, string) (*Grant, bool, error), error) {
	_, _ = c.exec(ctx, c.d.leaseDDL)
	micros := ttl.Microseconds()
	return ensured(c, []row{{c.d.hasLease, c.d.insertLease}}, func(ctx context.Context, name string) (*Grant, bool, error) {
		owner := fmt.Sprintf("%016x", rand.Uint64())
		token, ok, err := c.token(ctx, c.d.takeLease, micros, owner, name)
		if err != nil || !ok {
			return nil, false, err
		}
		return &Grant{token: token, release: func(ctx context.Context) error {
			n, err := c.exec(ctx, c.d.freeLease, owner, name)
			if err == nil && n != 1 {
				err = ErrNotHeld
			}
			return err
		}}, true, nil
	}), nil
}

// native: the server's own named locks, held by the session
// (pg_try_advisory_lock, GET_LOCK with no wait), with the session's idle
// timeout and the token taken in the same round trip once the lock is
// granted.
func native(ctx context.Context, _ string, c *SQLConn, ttl time.Duration) (func(context.Context, string) (*Grant, bool, error), error) {
	_, _ = c.exec(ctx, c.d.fenceDDL)
	return ensured(c, []row{{c.d.hasFence, c.d.insertFence}}, func(ctx context.Context, name string) (*Grant, bool, error) {
		token, ok, err := c.token(ctx, c.d.lockNative, c.d.nativeArgs(name, ttl)...)
		if err != nil || !ok {
			return nil, false, err
		}
		key := c.d.nativeKey(name)
		return &Grant{token: token, release: func(ctx context.Context) error {
			n, err := c.value(ctx, c.d.unlockNative, key)
			if err == nil && n != 1 {
				err = ErrNotHeld
			}
			return err
		}}, true, nil
	}), nil
}

// advisoryKey hashes a name to the 64-bit key of an advisory lock.
func advisoryKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// getLockKey is a GET_LOCK name: the name up to 64 characters, else a
// hash of it.
func getLockKey(name string) string {
	if len([]rune(name)) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return keyPrefix + hex.EncodeToString(sum[:])[:64-len(keyPrefix)]
}
