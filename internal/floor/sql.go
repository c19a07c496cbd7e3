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
	// The forupdate floors' token counter and its marker (dlock's
	// <table>_seq and <table>_live): the counter is never rolled back
	// while the server runs but may be set back by a crash; the marker is
	// a table that every crash or restart empties.
	rowSeq  = "dlockbench_floor_seq"
	rowLive = "dlockbench_floor_live"
)

// counterJump is how far a forupdate floor's recovery moves the counter
// on after a crash: dlock's (2^36), far more than the server can have
// issued without their advance reaching the disk.
const counterJump = "68719476736"

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
	// begin begins a transaction and runs token's query in it, in one
	// round trip; the transaction is left open (even on an error).
	begin func(ctx context.Context, query string, args ...any) (token uint64, ok bool, err error)
	close func() error
	// busy reports an error of a NOWAIT row lock that found the row
	// locked.
	busy func(error) bool
	d    *dialect
}

// dialect is what the SQL floors send, in a server's SQL.
type dialect struct {
	rowDDL, hasRow, insertRow string // forupdate: arg name
	// hasCounter counts the forupdate counter and marker tables that
	// exist; counterDDL creates them (a new counter clears the marker).
	hasCounter string
	counterDDL []string
	// rowIdle sets the idle timeout of the session's transactions once
	// per connection (arg idle(ttl)), or is "".
	rowIdle string
	// lockRow runs in a transaction begun in the same round trip (args
	// lockArgs): it locks the name's row without waiting, then takes a
	// token from the counter while the marker is there (else none, or
	// 0). freeRow rolls back. recoverRow moves the counter on by
	// counterJump and sets the marker, durably, when the marker is
	// missing.
	lockRow, freeRow, recoverRow string
	lockArgs                     func(name string, ttl time.Duration) []any
	leaseDDL, hasLease           string // version: arg name
	insertLease                  string
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
	rowDDL:     "CREATE TABLE IF NOT EXISTS " + rowTable + " (name text PRIMARY KEY)",
	hasRow:     "SELECT count(*) FROM " + rowTable + " WHERE name = $1",
	insertRow:  "INSERT INTO " + rowTable + " (name) VALUES ($1) ON CONFLICT DO NOTHING",
	hasCounter: "SELECT (to_regclass('" + rowSeq + "') IS NOT NULL)::int + (to_regclass('" + rowLive + "') IS NOT NULL)::int",
	counterDDL: []string{
		"CREATE UNLOGGED TABLE IF NOT EXISTS " + rowLive + " (since timestamptz NOT NULL DEFAULT now())",
		"DO $f$ BEGIN IF to_regclass('" + rowSeq + "') IS NULL THEN CREATE SEQUENCE " + rowSeq + "; DELETE FROM " + rowLive + "; END IF; END $f$",
	},
	// idle_in_transaction_session_timeout applies only inside a
	// transaction: set once, it bounds every lease and nothing else.
	rowIdle: "SELECT set_config('idle_in_transaction_session_timeout', $1, false)",
	// The CTE locks the row (MATERIALIZED: it is not merged into the
	// outer query), and only its row, once locked, takes the token:
	// nextval is never rolled back, and its advance is not flushed.
	lockRow: "WITH l AS MATERIALIZED (SELECT name FROM " + rowTable + " WHERE name = $1 FOR UPDATE NOWAIT)" +
		" SELECT CASE WHEN EXISTS (SELECT 1 FROM " + rowLive + ") THEN nextval('" + rowSeq + "') ELSE 0 END FROM l",
	freeRow: "ROLLBACK",
	// The commit is flushed (synchronous_commit on): the jump is on disk
	// before the marker can be seen. The table lock serialises
	// recoveries and waits for no lease (they read it in ACCESS SHARE).
	recoverRow: "BEGIN; SET LOCAL synchronous_commit = on; LOCK TABLE " + rowLive + " IN EXCLUSIVE MODE;" +
		" SELECT setval('" + rowSeq + "', s.last_value + " + counterJump + ") FROM " + rowSeq + " s WHERE NOT EXISTS (SELECT 1 FROM " + rowLive + ");" +
		" INSERT INTO " + rowLive + " SELECT now() WHERE NOT EXISTS (SELECT 1 FROM " + rowLive + "); COMMIT",
	lockArgs:    func(name string, _ time.Duration) []any { return []any{name} },
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
	rowDDL:     "CREATE TABLE IF NOT EXISTS " + rowTable + " (name VARCHAR(191) PRIMARY KEY) ENGINE=InnoDB",
	hasRow:     "SELECT COUNT(*) FROM " + rowTable + " WHERE name = ?",
	insertRow:  "INSERT IGNORE INTO " + rowTable + " (name) VALUES (?)",
	hasCounter: "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('" + rowSeq + "', '" + rowLive + "')",
	// Run only when one is missing: CREATE … IF NOT EXISTS of an existing
	// table waits for every open transaction that read it (every lease).
	counterDDL: []string{
		"CREATE TABLE IF NOT EXISTS " + rowLive + " (server BIGINT UNSIGNED NOT NULL PRIMARY KEY) ENGINE=MEMORY",
		"CREATE TABLE IF NOT EXISTS " + rowSeq + " (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY) ENGINE=InnoDB",
		"DELETE FROM " + rowLive,
	},
	// A batch stops at its first error: the timeout is set only once the
	// row is locked. It is the session's: freeRow puts it back. The
	// token is an AUTO_INCREMENT value, never given out again while the
	// server runs even though the INSERT is rolled back, taken while the
	// marker names this server.
	lockRow: "SELECT COUNT(*) INTO @dlockfloor_r FROM " + rowTable + " WHERE name = ? FOR UPDATE NOWAIT; SET SESSION wait_timeout = ?;" +
		" INSERT INTO " + rowSeq + " (id) SELECT NULL FROM DUAL WHERE @dlockfloor_r = 1 AND EXISTS (SELECT 1 FROM " + rowLive + " WHERE server = @@server_id)",
	freeRow: "ROLLBACK; SET SESSION wait_timeout = DEFAULT",
	// The jump is committed (an explicit id moves the AUTO_INCREMENT
	// counter on; the rows are deleted again) before the marker names
	// this server.
	recoverRow: "SELECT COUNT(*) INTO @dlockfloor_lv FROM " + rowLive + " WHERE server = @@server_id; START TRANSACTION;" +
		" INSERT INTO " + rowSeq + " (id) SELECT NULL FROM DUAL WHERE @dlockfloor_lv = 0;" +
		" SET @dlockfloor_v = IF(ROW_COUNT() = 1, LAST_INSERT_ID(), NULL); SET @dlockfloor_j = @dlockfloor_v + " + counterJump + ";" +
		" INSERT INTO " + rowSeq + " (id) SELECT @dlockfloor_j FROM DUAL WHERE @dlockfloor_j IS NOT NULL;" +
		" DELETE FROM " + rowSeq + " WHERE id IN (@dlockfloor_v, @dlockfloor_j); COMMIT;" +
		" SET @dlockfloor_sid = @@server_id; INSERT IGNORE INTO " + rowLive + " (server) SELECT @dlockfloor_sid FROM DUAL WHERE @dlockfloor_lv = 0",
	lockArgs:    func(name string, ttl time.Duration) []any { return []any{name, myIdle(ttl)} },
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
			return pgToken(c.QueryRow(ctx, q, args...))
		},
		begin: func(ctx context.Context, q string, args ...any) (uint64, bool, error) {
			// A batch is one pipeline: one round trip once its statements
			// are prepared (on their first use).
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue(q, args...)
			br := c.SendBatch(ctx, b)
			_, err := br.Exec()
			var token uint64
			var ok bool
			if err == nil {
				token, ok, err = pgToken(br.QueryRow())
			}
			return token, ok, errors.Join(err, br.Close())
		},
		close: func() error { return c.Close(context.Background()) },
		busy: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "55P03" // lock_not_available
		},
		d: postgres,
	}, nil
}

// pgToken reads a token statement's one row (none: ok false).
func pgToken(row pgx.Row) (uint64, bool, error) {
	var v *int64
	err := row.Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil || v == nil {
		return 0, false, err
	}
	return uint64(*v), true, nil
}

// myConn opens one pinned connection (myPinnedConn) for the SQL floors.
func myConn(ctx context.Context, rawURL string) (*SQLConn, error) {
	db, c, err := myPinnedConn(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	exec := func(ctx context.Context, q string, args ...any) (int64, error) {
		res, err := c.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	// token: the last statement's figures (go-sql-driver's Result).
	token := func(ctx context.Context, q string, args ...any) (uint64, bool, error) {
		res, err := c.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, false, err
		}
		n, err := res.RowsAffected()
		if err != nil || n != 1 {
			return 0, false, err
		}
		id, err := res.LastInsertId()
		return uint64(id), err == nil, err
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
		token: token,
		begin: func(ctx context.Context, q string, args ...any) (uint64, bool, error) {
			return token(ctx, "BEGIN; "+q, args...)
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

// forUpdate: the name's row locked by SELECT … FOR UPDATE NOWAIT in a
// transaction begun in the same round trip and left open on the pinned
// connection while the lock is held, the server's idle timeout ending a
// hung holder's transaction, ROLLBACK to free: nothing is written, nothing
// flushed. The token is dlock's: taken under the row lock from a counter
// that is never rolled back while the server runs, while a marker that
// every crash or restart empties is there; a missing marker means the
// counter may have gone back, and the attempt is rolled back while the
// counter is moved on by counterJump in a flushed commit and the marker
// set (recoverRow), once per crash, then made again. A row found locked
// rolls back.
func forUpdate(ctx context.Context, _ string, c *SQLConn, ttl time.Duration) (func(context.Context, string) (*Grant, bool, error), error) {
	// Concurrent CREATE … IF NOT EXISTS can collide on the catalog: the
	// loser's error is ignored and the INSERT (or the first grant) tells.
	_, _ = c.exec(ctx, c.d.rowDDL)
	if n, err := c.value(ctx, c.d.hasCounter); err != nil || n < 2 {
		for _, ddl := range c.d.counterDDL {
			_, _ = c.exec(ctx, ddl)
		}
	}
	if c.d.rowIdle != "" {
		if _, err := c.exec(ctx, c.d.rowIdle, c.d.idle(ttl)); err != nil {
			return nil, err
		}
	}
	free := func(ctx context.Context) error { return c.multi(ctx, c.d.freeRow) }
	return ensured(c, []row{{c.d.hasRow, c.d.insertRow}}, func(ctx context.Context, name string) (*Grant, bool, error) {
		for recovered := false; ; recovered = true {
			token, ok, err := c.begin(ctx, c.d.lockRow, c.d.lockArgs(name, ttl)...)
			if err != nil {
				rbErr := free(ctx)
				if c.busy(err) {
					return nil, false, rbErr
				}
				return nil, false, err
			}
			if ok && token > 0 {
				return &Grant{token: token, release: free}, true, nil
			}
			// The marker is missing: no token was taken.
			if err := free(ctx); err != nil {
				return nil, false, err
			}
			if recovered {
				return nil, false, fmt.Errorf("floor: no token for %q: the counter's marker is missing after recovery", name)
			}
			if err := c.multi(ctx, c.d.recoverRow); err != nil {
				return nil, false, fmt.Errorf("floor: recover the token counter: %w", err)
			}
		}
	}), nil
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
