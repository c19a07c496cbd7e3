// Package mysql is dlock's MySQL and MariaDB driver (with
// go-sql-driver/mysql over database/sql). Import it for its side effect of
// registering the mysql:// URL scheme, or call OpenLocker with an
// existing *sql.DB. It is tested on MariaDB and written for MySQL 8 too
// (SELECT … FOR UPDATE NOWAIT needs MariaDB 10.3 or MySQL 8.0).
//
// # Strategies
//
//   - forupdate (default): a row of the lock table locked with
//     SELECT … FOR UPDATE (NOWAIT for TryAcquire) in a transaction kept
//     open on a connection pinned for the lease. Waiters wait in InnoDB's
//     row-lock queue; Acquire's wait is bounded by the context's deadline
//     (innodb_lock_wait_timeout, whole seconds) and cut short by its
//     cancellation (the client closes the connection and the driver KILLs
//     it on the server, so no waiter is left behind). Release commits. The
//     session's wait_timeout is set to the TTL rounded up to whole seconds
//     (at least 1s): a holder that stops talking loses the lock after it; a
//     holder whose process dies loses it at once. The keep-alive (every
//     TTL/3) pings the pinned connection. The token is taken inside the
//     lease's open transaction, so before it is returned a short
//     transaction on another connection (a counter value taken and
//     dropped) commits, which writes InnoDB's redo log with the token's
//     counter advance in it: a crash of the server during the lease
//     cannot hand the same token out again (as durable as
//     innodb_flush_log_at_trx_commit makes a commit). With
//     SetMaxOpenConns(N), at most N-1 forupdate leases are held at once,
//     so that this commit always finds a connection (N = 1 is an error
//     wrapping ErrInvalidOption). The first attempt at a name inserts its
//     row; while another transaction holds an InnoDB gap lock around it (a
//     concurrent first attempt at a neighbouring name), a TryAcquire can
//     return ErrNotAcquired although the name was free, and Acquire waits
//     for that lock.
//   - version: an optimistic lease row whose expiry is computed by the
//     server's clock (UTC_TIMESTAMP(6)); refresh and release are
//     conditional on the grant's token. Waiters poll with capped, jittered
//     backoff (MySQL has no LISTEN), sleeping no longer than the holder's
//     remaining TTL.
//   - getlock: GET_LOCK(name, timeout) on a pinned connection; names
//     longer than 64 characters (GET_LOCK's limit) are replaced by
//     "dlock#" and 58 hex digits of their SHA-256. GET_LOCK's names are
//     server-wide, not per database or table.
//
// Every strategy's token is a value of an AUTO_INCREMENT counter (table
// <table>_fence, kept empty), which InnoDB never rolls back: a holder
// whose transaction died with its connection cannot share its token with
// the next holder. forupdate and version also write the token to the
// name's row (column fence); getlock writes no row. A script of statements is sent as one multi-statement (one
// round trip) when the connection allows it.
//
// Capabilities.SessionBound is false for the same reason as on
// PostgreSQL: a broken connection is a lost lease, and the server frees a
// silent holder after wait_timeout, which the TTL sets.
//
// # URLs
//
//	mysql://user:password@tcp(host:port)/database?strategy=forupdate
//	mysql://user:password@host:port/database?strategy=getlock
//
// The first form is go-sql-driver's DSN behind mysql://; in the second,
// user and password may be percent-encoded. dlock's parameters:
//
//   - strategy: forupdate (default), version or getlock.
//   - table: the lock table, "table" or "database.table" (default
//     dlock_locks); letters, digits and underscores only.
//   - migrate: create the table and its counter if missing (default true).
//
// The other parameters must be go-sql-driver's (tls, timeout, readTimeout,
// writeTimeout, charset, collation, loc, maxAllowedPacket,
// connectionAttributes, …) or one of the session variables sql_mode,
// time_zone and transaction_isolation; any other is an error (go-sql-driver
// would send it to the server as a variable, where a misspelt dlock
// parameter fails late). dlock sets interpolateParams=true, parseTime=true
// and multiStatements=true (set multiStatements=false to send one statement
// per round trip).
//
// Open connects (and creates the tables) before it returns. The password
// never appears in an error.
package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/sqllock"
)

// Scheme is the URL scheme this package registers.
const Scheme = "mysql"

// DefaultTable is the lock table when Options.Table is empty.
const DefaultTable = sqllock.DefaultTable

func init() { dlock.Register(Scheme, openURL) }

// Options configure OpenLocker. A nil *Options, and every zero field,
// means the default.
type Options struct {
	// Strategy is "forupdate" (default), "version" or "getlock".
	Strategy string
	// Table is the lock table, "table" or "database.table" (default
	// DefaultTable). It is validated as identifiers and quoted.
	Table string
	// NoMigrate: do not create the tables on first use.
	NoMigrate bool
	// MultiStatements: the DB's DSN has multiStatements=true and
	// interpolateParams=true, so that a script goes in one round trip.
	MultiStatements bool
}

func (o *Options) config(db *sql.DB, owned bool) (sqllock.Config, error) {
	if o == nil {
		o = &Options{}
	}
	return sqllock.NewConfig(&dialect{}, &pool{db: db, owned: owned, multi: o.MultiStatements}, o.Strategy, o.Table, !o.NoMigrate)
}

// OpenLocker returns a Locker on an existing *sql.DB of go-sql-driver.
// Closing the Locker does not close it. Each held forupdate or getlock
// lease pins one connection until it ends. Open the DB with
// interpolateParams=true (and multiStatements=true with
// Options.MultiStatements) to save round trips.
//
// OpenLocker panics on an invalid opts.Strategy or opts.Table.
func OpenLocker(db *sql.DB, opts *Options) *dlock.Locker {
	cfg, err := opts.config(db, false)
	if err != nil {
		panic(err)
	}
	return dlock.NewLocker(sqllock.New(cfg))
}

// driverParams are go-sql-driver's DSN parameters, and the session
// variables accepted in a URL.
var driverParams = []string{
	"allowAllFiles", "allowCleartextPasswords", "allowFallbackToPlaintext", "allowNativePasswords", "allowOldPasswords",
	"charset", "checkConnLiveness", "clientFoundRows", "collation", "columnsWithAlias", "compress", "connectionAttributes",
	"loc", "timeTruncate", "maxAllowedPacket", "multiStatements", "readTimeout", "rejectReadOnly", "serverPubKey",
	"timeout", "tls", "writeTimeout", "interpolateParams", "parseTime",
	"sql_mode", "time_zone", "transaction_isolation",
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: mysql: "+format, append([]any{driver.ErrInvalidOption}, args...)...)
}

// parseURL turns a mysql:// URL into dlock's options and go-sql-driver's
// config.
func parseURL(raw string) (*Options, *gomysql.Config, error) {
	rest, ok := strings.CutPrefix(raw, Scheme+"://")
	if !ok {
		return nil, nil, invalid("want mysql://user:password@host:port/database")
	}
	rest, query, _ := strings.Cut(rest, "?")
	vals, err := url.ParseQuery(query)
	if err != nil {
		return nil, nil, invalid("malformed query")
	}
	q := driver.NewParams(vals)
	opts := &Options{
		Strategy:        q.Enum("strategy", string(sqllock.ForUpdate), string(sqllock.ForUpdate), string(sqllock.Version), "getlock"),
		Table:           q.String("table", DefaultTable),
		NoMigrate:       !q.Bool("migrate", true),
		MultiStatements: q.Bool("multiStatements", true),
	}
	pass := q.Rest()
	for k := range pass {
		if slices.Contains(driverParams, k) {
			q.Has(k)
		}
	}
	if err := q.Err(); err != nil {
		return nil, nil, fmt.Errorf("mysql: %w", err)
	}
	at := strings.LastIndexByte(rest, '@')
	userinfo, hostdb := "", rest
	if at >= 0 {
		userinfo, hostdb = rest[:at], rest[at+1:]
	}
	if !strings.Contains(hostdb, "(") { // host:port/db → tcp(host:port)/db
		host, db, _ := strings.Cut(hostdb, "/")
		hostdb = "tcp(" + host + ")/" + db
		if u, err := url.Parse("x://" + userinfo + "@h"); err == nil && at >= 0 {
			p, _ := u.User.Password()
			userinfo = u.User.Username()
			if _, has := u.User.Password(); has {
				userinfo += ":" + p
			}
		}
	}
	dsn := hostdb
	if at >= 0 {
		dsn = userinfo + "@" + hostdb
	}
	pass.Set("interpolateParams", "true")
	pass.Set("parseTime", "true")
	pass.Set("multiStatements", fmt.Sprint(opts.MultiStatements))
	cfg, err := gomysql.ParseDSN(dsn + "?" + pass.Encode())
	if err != nil {
		return nil, nil, invalid("%v", err)
	}
	return opts, cfg, nil
}

func openURL(ctx context.Context, raw string) (driver.Locker, error) {
	opts, cfg, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, invalid("%v", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxIdleConns(32)
	lc, err := opts.config(db, true)
	if err != nil {
		db.Close()
		return nil, err
	}
	return sqllock.Open(ctx, lc, db.PingContext)
}

// Execer is *sql.DB, *sql.Conn or *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// FencedUpdate writes to a row of your own table only if token is at least
// the row's fence, and stores token there: the resource side of fencing.
// A holder that lost its lock while paused, and whose successor has
// written since, carries a lower token and changes nothing (false). The
// statement is "UPDATE table SET <set>, fenceColumn = token WHERE (<where>)
// AND fenceColumn <= token"; args fill the ? of set and where in order.
// table ("table" or "database.table") and fenceColumn (a BIGINT, 0
// initially) are validated and quoted. Without clientFoundRows=true MySQL
// reports only changed rows: an identical repeated write returns false.
func FencedUpdate(ctx context.Context, db Execer, table, fenceColumn string, token uint64, set, where string, args ...any) (bool, error) {
	q, _, err := sqllock.FencedSQL(&dialect{}, table, fenceColumn, set, where, len(args))
	if err != nil {
		return false, err
	}
	res, err := db.ExecContext(ctx, q, append([]any{int64(token)}, args...)...)
	if err != nil {
		return false, err
	}
	rows, err := res.RowsAffected()
	return rows > 0, err
}
