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
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The tables of the SQL floors: rowTable's rows are locked by the
// forupdate floors, leaseTable's rows are the version floors' leases.
// (Their names are dlockbench's from before the floors moved here, so
// that a server it ran on keeps two tables, not four.)
const (
	rowTable   = "dlockbench_floor"
	leaseTable = "dlockbench_lease"
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
	close func() error
	// busy reports an error of a NOWAIT row lock that found the row
	// locked.
	busy func(error) bool
	d    *dialect
}

// dialect is what the SQL floors send, in a server's SQL.
type dialect struct {
	rowDDL, hasRow, insertRow string // forupdate: arg name
	lockRow                   string // forupdate: arg name; sends BEGIN with the row lock
	leaseDDL, hasLease        string // version: arg name
	insertLease               string
	takeLease, freeLease      string // version: args (ttl µs, owner, name) and (owner, name)
	lockNative, unlockNative  string // native: arg key; both return 1 on success
	nativeKey                 func(name string) any
}

var postgres = &dialect{
	rowDDL:      "CREATE TABLE IF NOT EXISTS " + rowTable + " (name text PRIMARY KEY)",
	hasRow:      "SELECT count(*) FROM " + rowTable + " WHERE name = $1",
	insertRow:   "INSERT INTO " + rowTable + " (name) VALUES ($1) ON CONFLICT DO NOTHING",
	lockRow:     "BEGIN; SELECT 1 FROM " + rowTable + " WHERE name = $1 FOR UPDATE NOWAIT",
	leaseDDL:    "CREATE TABLE IF NOT EXISTS " + leaseTable + " (name text PRIMARY KEY, owner text, expires timestamptz, version bigint NOT NULL DEFAULT 0)",
	hasLease:    "SELECT count(*) FROM " + leaseTable + " WHERE name = $1",
	insertLease: "INSERT INTO " + leaseTable + " (name) VALUES ($1) ON CONFLICT DO NOTHING",
	takeLease: "UPDATE " + leaseTable + " SET expires = now() + $1::bigint * interval '1 microsecond', owner = $2, version = version + 1" +
		" WHERE name = $3 AND (owner IS NULL OR expires <= now())",
	freeLease:    "UPDATE " + leaseTable + " SET owner = NULL WHERE owner = $1 AND name = $2 AND expires > now()",
	lockNative:   "SELECT pg_try_advisory_lock($1)::int::bigint",
	unlockNative: "SELECT pg_advisory_unlock($1)::int::bigint",
	nativeKey:    func(name string) any { return advisoryKey(keyPrefix + name) },
}

var mySQL = &dialect{
	rowDDL:      "CREATE TABLE IF NOT EXISTS " + rowTable + " (name VARCHAR(191) PRIMARY KEY) ENGINE=InnoDB",
	hasRow:      "SELECT COUNT(*) FROM " + rowTable + " WHERE name = ?",
	insertRow:   "INSERT IGNORE INTO " + rowTable + " (name) VALUES (?)",
	lockRow:     "BEGIN; SELECT 1 FROM " + rowTable + " WHERE name = ? FOR UPDATE NOWAIT",
	leaseDDL:    "CREATE TABLE IF NOT EXISTS " + leaseTable + " (name VARCHAR(191) PRIMARY KEY, owner VARCHAR(64), expires DATETIME(6), version BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
	hasLease:    "SELECT COUNT(*) FROM " + leaseTable + " WHERE name = ?",
	insertLease: "INSERT IGNORE INTO " + leaseTable + " (name) VALUES (?)",
	takeLease: "UPDATE " + leaseTable + " SET expires = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, owner = ?, version = version + 1" +
		" WHERE name = ? AND (owner IS NULL OR expires <= UTC_TIMESTAMP(6))",
	freeLease:    "UPDATE " + leaseTable + " SET owner = NULL WHERE owner = ? AND name = ? AND expires > UTC_TIMESTAMP(6)",
	lockNative:   "SELECT GET_LOCK(?, 0)",
	unlockNative: "SELECT RELEASE_LOCK(?)",
	nativeKey:    func(name string) any { return getLockKey(keyPrefix + name) },
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
// connection; the attempt it returns is the floor's.
func sqlFloor(setup func(ctx context.Context, c *SQLConn, ttl time.Duration) (try func(ctx context.Context, name string) (func(context.Context) error, bool, error), err error)) func(context.Context, string, time.Duration) (*Lock, error) {
	return func(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error) {
		c, err := DialSQL(ctx, rawURL)
		if err != nil {
			return nil, err
		}
		try, err := setup(ctx, c, ttl)
		if err != nil {
			c.close()
			return nil, err
		}
		return &Lock{try: try, close: c.close}, nil
	}
}

// ensured makes sure once per connection that a name has its row,
// outside the steady state of a benchmark, then makes the attempt. The
// row is looked for by a read that takes no lock before it is inserted:
// on MySQL, an INSERT IGNORE of a row another holder has locked would
// wait for that holder.
func ensured(c *SQLConn, has, insert string, try func(ctx context.Context, name string) (func(context.Context) error, bool, error)) func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
	seen := map[string]bool{}
	return func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
		if !seen[name] {
			n, err := c.value(ctx, has, name)
			if err == nil && n == 0 {
				_, err = c.exec(ctx, insert, name)
			}
			if err != nil {
				return nil, false, err
			}
			seen[name] = true
		}
		return try(ctx, name)
	}
}

// forUpdate: BEGIN and SELECT … FOR UPDATE NOWAIT sent together (one
// round trip), the transaction left open on the pinned connection while
// the lock is held, COMMIT to free. A row found locked rolls back.
func forUpdate(ctx context.Context, c *SQLConn, _ time.Duration) (func(context.Context, string) (func(context.Context) error, bool, error), error) {
	// Concurrent CREATE TABLE IF NOT EXISTS can collide on the catalog:
	// the loser's error is ignored and the INSERT tells.
	_, _ = c.exec(ctx, c.d.rowDDL)
	commit := func(ctx context.Context) error { _, err := c.exec(ctx, "COMMIT"); return err }
	return ensured(c, c.d.hasRow, c.d.insertRow, func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
		err := c.multi(ctx, c.d.lockRow, name)
		if err != nil {
			_, rbErr := c.exec(ctx, "ROLLBACK")
			if c.busy(err) {
				return nil, false, rbErr
			}
			return nil, false, err
		}
		return commit, true, nil
	}), nil
}

// version: a lease row taken by one conditional UPDATE when it is free
// or expired by the server's clock (its version, a fence, moves on),
// freed by another conditional on the owner and on the lease not having
// expired. No connection is held in between.
func version(ctx context.Context, c *SQLConn, ttl time.Duration) (func(context.Context, string) (func(context.Context) error, bool, error), error) {
	_, _ = c.exec(ctx, c.d.leaseDDL)
	micros := ttl.Microseconds()
	return ensured(c, c.d.hasLease, c.d.insertLease, func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
		owner := fmt.Sprintf("%016x", rand.Uint64())
		n, err := c.exec(ctx, c.d.takeLease, micros, owner, name)
		if err != nil || n != 1 {
			return nil, false, err
		}
		return func(ctx context.Context) error {
			n, err := c.exec(ctx, c.d.freeLease, owner, name)
			if err == nil && n != 1 {
				err = ErrNotHeld
			}
			return err
		}, true, nil
	}), nil
}

// native: the server's own named locks, held by the session
// (pg_try_advisory_lock, GET_LOCK with no wait).
func native(ctx context.Context, c *SQLConn, _ time.Duration) (func(context.Context, string) (func(context.Context) error, bool, error), error) {
	return func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
		key := c.d.nativeKey(name)
		n, err := c.value(ctx, c.d.lockNative, key)
		if err != nil || n != 1 {
			return nil, false, err
		}
		return func(ctx context.Context) error {
			n, err := c.value(ctx, c.d.unlockNative, key)
			if err == nil && n != 1 {
				err = ErrNotHeld
			}
			return err
		}, true, nil
	}, nil
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
