// Package mysql is dlock's MySQL and MariaDB driver (with
// go-sql-driver/mysql over database/sql). Import it for its side effect of
// registering the mysql:// URL scheme, or call OpenLocker with an
// existing *sql.DB. It is tested on MariaDB and written for MySQL 8 too:
// it refuses (ErrInvalidOption) MariaDB before 10.3 and MySQL before 8.0,
// whose InnoDB recomputes an AUTO_INCREMENT counter at restart (tokens
// would start again), and a token counter table not on InnoDB.
//
// # Strategies
//
//   - forupdate (default): a row of the lock table locked with
//     SELECT … FOR UPDATE (NOWAIT for TryAcquire) in a transaction kept
//     open on a connection pinned for the lease. Waiters wait in InnoDB's
//     row-lock queue; Acquire's wait is bounded by the context's deadline
//     (innodb_lock_wait_timeout, whole seconds) and cut short by its
//     cancellation (the client closes the connection and the driver KILLs
//     its session on the server, so no waiter is left behind; the KILL
//     names the session by a user lock it took when it connected,
//     KILL IS_USED_LOCK(marker), never by a connection id alone, which
//     after a restart of the server may be another client's). Release
//     commits. The session's wait_timeout is set to the TTL rounded up to
//     whole seconds: a holder that stops talking loses the lock after it;
//     a holder whose process dies loses it at once; and when a lease ends
//     for its holder (its deadline passed unrefreshed) the driver closes
//     its connection at that moment, so the server frees the lock then,
//     not a second later. The keep-alive (every
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
//     remaining TTL. An attempt whose reply is lost (a cancelled
//     context) is undone by a clean-up keyed by a nonce the attempt wrote
//     to the row, so it leaves no lease behind.
//   - getlock: GET_LOCK(name, timeout) on a pinned connection; names
//     longer than 64 characters (GET_LOCK's limit) are replaced by
//     "dlock#" and 58 hex digits of their SHA-256. GET_LOCK's names are
//     server-wide, not per database or table.
//
// TTLs (Capabilities.MinTTL and MaxTTL): forupdate and getlock accept 1s
// to 31536000s (wait_timeout's range, in whole seconds: a shorter TTL is
// not one the server can enforce); version accepts 5ms to 10 years (its
// expiry, UTC_TIMESTAMP(6) plus the TTL, must stay a DATETIME). A TTL
// outside is ErrInvalidOption before any server call.
//
// # Tables
//
// One table serves one strategy: a row lock, a lease row and a GET_LOCK
// do not see each other, so two strategies on one table would both hold
// one name. The first Locker to use a table records its strategy in it
// (the row of the empty name, which is no lock name); a Locker of another
// strategy on that table fails with ErrInvalidOption. Without a table
// parameter (or with table=dlock_locks) forupdate uses dlock_locks and the
// others dlock_locks_version and dlock_locks_getlock. GET_LOCK's names are
// server-wide: getlock Lockers on two tables exclude each other but take
// tokens from two counters; give every getlock Locker of a name the same
// table.
//
// Every strategy's token is a value of an AUTO_INCREMENT counter (table
// <table>_fence, kept empty, created starting at the server's clock in
// microseconds, so that a counter dropped and created again goes on above
// the old one's tokens), which InnoDB never rolls back: a holder
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
// The first form is go-sql-driver's DSN behind mysql://. In both, user
// and password may be percent-encoded (a '%' must be written %25), and
// the URL is read as driver.ParseURL reads every dlock URL. dlock's
// parameters:
//
//   - strategy: forupdate (default), version or getlock.
//   - table: the lock table, "table" or "database.table" (default
//     dlock_locks for forupdate, dlock_locks_<strategy> for the others; see
//     Tables); letters, digits and underscores only.
//   - migrate: create the table and its counter if missing (default true).
//
// go-sql-driver's parameters allowed, each validated: the booleans
// allowCleartextPasswords, allowFallbackToPlaintext, allowNativePasswords,
// allowOldPasswords, checkConnLiveness, clientFoundRows,
// columnsWithAlias, compress, rejectReadOnly, interpolateParams,
// parseTime and multiStatements; the durations timeout, readTimeout,
// writeTimeout and timeTruncate; maxAllowedPacket; the names charset (one
// charset), collation, tls and serverPubKey; loc (a time zone name);
// connectionAttributes (key:value,...). allowAllFiles is refused (dlock
// never loads files, and it lets a server read the client's). The
// session variables time_zone ('+00:00', 'SYSTEM' or a zone name),
// sql_mode (a comma-separated list of modes) and transaction_isolation
// (READ-COMMITTED, ...) are accepted only with values of that form,
// quoted or not: go-sql-driver sends them to the server as
// "SET name = value", so anything else could be SQL. Any other parameter
// is an error. dlock sets interpolateParams=true, parseTime=true and
// multiStatements=true (set multiStatements=false to send one statement
// per round trip); a URL that sets a session variable gets
// multiStatements=false, and asking for both is an error.
//
// Open connects (and creates the tables) before it returns. The password
// never appears in an error.
package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

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
	// DefaultTable for forupdate, DefaultTable_<strategy> for the others:
	// one table serves one strategy). It is validated as identifiers and
	// quoted.
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
// OpenLocker returns an error wrapping dlock.ErrInvalidOption if db is
// nil or opts.Strategy or opts.Table is invalid; it makes no server call.
func OpenLocker(db *sql.DB, opts *Options) (*dlock.Locker, error) {
	if db == nil {
		return nil, fmt.Errorf("mysql: OpenLocker needs a DB: %w", driver.ErrInvalidOption)
	}
	cfg, err := opts.config(db, false)
	if err != nil {
		return nil, err
	}
	return dlock.NewLocker(sqllock.New(cfg)), nil
}

// Session variables a URL may set, each with the strict pattern of its
// value (quotes are added by dlock). go-sql-driver sends a session
// variable to the server verbatim as "SET name = value": a value outside
// these patterns could be SQL, and is refused.
var sessionVars = map[string]*regexp.Regexp{
	"time_zone":             regexp.MustCompile(`^(?i:system|[+-][0-9]{1,2}:[0-9]{2}|[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*)$`),
	"sql_mode":              regexp.MustCompile(`^[A-Za-z_]*(,[A-Za-z_]+)*$`),
	"transaction_isolation": regexp.MustCompile(`^(?i:read-uncommitted|read-committed|repeatable-read|serializable)$`),
}

var (
	// nameRE is a charset, collation, TLS config or public key name.
	nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	// locRE is a time zone name for time.LoadLocation.
	locRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`)
	// attrsRE is connectionAttributes: key:value pairs separated by commas.
	attrsRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+:[A-Za-z0-9_./ -]*(,[A-Za-z0-9_.-]+:[A-Za-z0-9_./ -]*)*$`)
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("mysql: %s: %w", fmt.Sprintf(format, args...), driver.ErrInvalidOption)
}

// parseURL turns a mysql:// URL into dlock's options and go-sql-driver's
// config. It reads the URL with driver.ParseURL and fills the config
// itself: only the parameters read below reach go-sql-driver, each
// validated, so that no URL parameter can be executed as SQL.
func parseURL(raw string) (*Options, *gomysql.Config, error) {
	u, err := driver.ParseURL(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("mysql: %w", err)
	}
	if u.Scheme != Scheme {
		return nil, nil, invalid("want mysql://user:password@host:port/database")
	}
	q := u.Params
	opts := &Options{
		Strategy:  q.Enum("strategy", string(sqllock.ForUpdate), string(sqllock.ForUpdate), string(sqllock.Version), "getlock"),
		Table:     q.String("table", DefaultTable),
		NoMigrate: !q.Bool("migrate", true),
	}
	cfg := gomysql.NewConfig()
	cfg.InterpolateParams = q.Bool("interpolateParams", true)
	cfg.ParseTime = q.Bool("parseTime", true)
	cfg.AllowCleartextPasswords = q.Bool("allowCleartextPasswords", false)
	cfg.AllowFallbackToPlaintext = q.Bool("allowFallbackToPlaintext", false)
	cfg.AllowNativePasswords = q.Bool("allowNativePasswords", true)
	cfg.AllowOldPasswords = q.Bool("allowOldPasswords", false)
	cfg.CheckConnLiveness = q.Bool("checkConnLiveness", true)
	cfg.ClientFoundRows = q.Bool("clientFoundRows", false)
	cfg.ColumnsWithAlias = q.Bool("columnsWithAlias", false)
	cfg.RejectReadOnly = q.Bool("rejectReadOnly", false)
	cfg.Timeout = q.Duration("timeout", 0)
	cfg.ReadTimeout = q.Duration("readTimeout", 0)
	cfg.WriteTimeout = q.Duration("writeTimeout", 0)
	cfg.MaxAllowedPacket = q.Int("maxAllowedPacket", cfg.MaxAllowedPacket, 0, 1<<30)
	compress := q.Bool("compress", false)
	truncate := q.Duration("timeTruncate", 0)
	charset := q.String("charset", "")
	cfg.Collation = q.String("collation", "")
	cfg.TLSConfig = q.String("tls", "")
	cfg.ServerPubKey = q.String("serverPubKey", "")
	cfg.ConnectionAttributes = q.String("connectionAttributes", "")
	loc := q.String("loc", "")
	multi, multiSet := q.Bool("multiStatements", true), q.Has("multiStatements")
	for name, re := range sessionVars {
		v, ok := strings.CutPrefix(q.String(name, ""), "'")
		if !q.Has(name) {
			continue
		}
		if ok {
			if v, ok = strings.CutSuffix(v, "'"); !ok {
				return nil, nil, invalid("parameter %s: unbalanced quote", name)
			}
		}
		if !re.MatchString(v) {
			return nil, nil, invalid("parameter %s=%q: not a valid value of %s", name, v, name)
		}
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[name] = "'" + v + "'"
	}
	if err := q.Err(); err != nil {
		return nil, nil, fmt.Errorf("mysql: %w", err)
	}
	for _, c := range []struct{ name, v string }{{"charset", charset}, {"collation", cfg.Collation}, {"tls", cfg.TLSConfig}, {"serverPubKey", cfg.ServerPubKey}} {
		if c.v != "" && !nameRE.MatchString(c.v) {
			return nil, nil, invalid("parameter %s=%q: want a name of letters, digits, '_', '.' and '-'", c.name, c.v)
		}
	}
	if cfg.ConnectionAttributes != "" && !attrsRE.MatchString(cfg.ConnectionAttributes) {
		return nil, nil, invalid("parameter connectionAttributes=%q: want key:value,key:value", cfg.ConnectionAttributes)
	}
	if loc != "" {
		if !locRE.MatchString(loc) {
			return nil, nil, invalid("parameter loc=%q: want a time zone name", loc)
		}
		if cfg.Loc, err = time.LoadLocation(loc); err != nil {
			return nil, nil, invalid("parameter loc=%q: unknown time zone", loc)
		}
	}
	if charset != "" {
		_ = cfg.Apply(gomysql.Charset(charset, cfg.Collation))
	}
	_ = cfg.Apply(gomysql.EnableCompression(compress), gomysql.TimeTruncate(truncate))
	// Session variables come from the URL: keep multi-statements off on
	// their connections, as a second wall behind the patterns above.
	if len(cfg.Params) > 0 {
		if multiSet && multi {
			return nil, nil, invalid("multiStatements=true cannot be combined with session variables (%s)", strings.Join(slices.Sorted(maps.Keys(cfg.Params)), ", "))
		}
		multi = false
	}
	opts.MultiStatements = multi
	cfg.MultiStatements = multi
	if multi {
		cfg.InterpolateParams = true
	}

	cfg.User, cfg.Passwd = u.User, u.Password
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	switch host := u.Host; {
	case len(u.Hosts) > 1:
		return nil, nil, invalid("one host only, not %d", len(u.Hosts))
	case host == "":
	case strings.HasSuffix(host, ")"):
		network, addr, _ := strings.Cut(strings.TrimSuffix(host, ")"), "(")
		if network != "tcp" && network != "tcp6" && network != "unix" {
			return nil, nil, invalid("network %q: want tcp(host:port) or unix(/path)", network)
		}
		cfg.Net, cfg.Addr = network, addr
	default:
		cfg.Net, cfg.Addr = "tcp", host
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
