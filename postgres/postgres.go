// Package postgres is dlock's PostgreSQL driver (with pgx v5 and pgxpool).
// Import it for its side effect of registering the postgres:// and
// postgresql:// URL schemes, or call OpenLocker with an existing pool.
//
// # Strategies
//
//   - forupdate (default): a row of the lock table locked with
//     SELECT … FOR UPDATE (NOWAIT for TryAcquire) in a transaction kept
//     open on a connection pinned for the lease. Waiters wait in the
//     server's row-lock queue; Acquire's wait is bounded by the context's
//     deadline (lock_timeout) and cut short by its cancellation. Release
//     commits. The session sets idle_in_transaction_session_timeout to the
//     lease TTL: a holder that stops talking (paused, partitioned) loses the
//     lock after the TTL; a holder whose process dies loses it at once (its
//     connection closes). The keep-alive (every TTL/3) pings the pinned
//     connection, which restarts that timer. Two round trips per acquire
//     (a pgx batch: BEGIN, set_config, the locking UPDATE; then a commit
//     with synchronous_commit on, on another connection of the pool, that
//     makes the token's sequence value durable before it is returned, so
//     that a crash of the server during the lease cannot hand the same
//     token out again) and one per release. A held lease pins one
//     connection, and the pool keeps one free for that commit: a pool of
//     pool_max_conns=N holds at most N-1 forupdate leases at once (N = 1
//     is an error wrapping ErrInvalidOption).
//   - version: an optimistic lease row: a conditional INSERT … ON CONFLICT
//     DO UPDATE … WHERE expires_at <= now() takes it, with the expiry
//     computed by the server's clock; refresh and release are conditional
//     on the grant's token. No connection is pinned. Waiters are woken by
//     LISTEN/NOTIFY (one listening connection per Locker, one channel per
//     lock table, the payload is the name) and by the holder's remaining
//     TTL when it expires without a release.
//   - advisory: pg_advisory_lock on a pinned connection (the 64-bit key
//     is the first 8 bytes of SHA-256 over the table's and the lock's
//     names: two names collide with probability 2^-64 per pair, and then
//     merely exclude each other). The session sets idle_session_timeout
//     (PostgreSQL 14 or later) to the TTL.
//
// TTLs (Capabilities.MinTTL and MaxTTL): forupdate accepts 50ms to
// 2147483647ms and advisory 5ms to 2147483647ms (the idle timeouts are
// int32 milliseconds; a forupdate grant waits idle in its transaction
// while its token is made durable, which a shorter TTL does not survive);
// version accepts 5ms to 10 years. A TTL outside is ErrInvalidOption
// before any server call. When a forupdate or advisory lease ends for its
// holder (its deadline passed unrefreshed) the driver closes its
// connection at that moment, so the server frees the lock then. A
// cancelled version attempt whose reply was lost is undone by a clean-up
// keyed by a nonce the attempt wrote to the row. The driver never ends a
// backend by its pid (after a restart a pid may be another client's): it
// cancels with the backend's own secret key and closes its connection.
//
// # Tables
//
// One table serves one strategy: a row lock, a lease row and an advisory
// lock do not see each other, so two strategies on one table would both
// hold one name. The first Locker to use a table records its strategy in
// it (the row of the empty name, which is no lock name); a Locker of
// another strategy on that table fails with ErrInvalidOption. Without a
// table parameter (or with table=dlock_locks) forupdate uses dlock_locks
// and the others dlock_locks_version and dlock_locks_advisory. Table names
// are unquoted identifiers, folded to lower case as PostgreSQL folds them
// ("Locks" is locks), and resolved by the server (search_path) before
// anything is derived from them: table=locks and table=public.locks are
// one table and one set of advisory keys.
//
// Every strategy's token comes from the sequence <table>_fence (created
// starting at the server's clock in microseconds, so that a sequence
// dropped and created again goes on above the old one's tokens), whose
// values are never rolled back or reused: a holder whose transaction died
// with its connection cannot share its token with the next holder.
// forupdate and version also write the token to the name's row (column
// fence); advisory writes no row.
//
// A lease is not bound to the server's clock but to its connection: a
// broken connection is a lost lease (Lease.Done closes as soon as the
// keep-alive finds it). Capabilities.SessionBound is false all the same:
// the server frees a silent holder after its idle timeout, which the TTL
// sets, so the portable layer's TTL deadline is the right, conservative
// bound for the holder (every statement on the pinned connection restarts
// the server's timer).
//
// # URLs
//
//	postgres://user:password@host:port/database?strategy=forupdate
//	postgresql://user:password@host:port/database?sslmode=disable&strategy=advisory
//
// Everything but dlock's parameters is handed to pgxpool.ParseConfig, so
// libpq-style hosts, ports and settings work as they do in pgx. dlock's
// parameters:
//
//   - strategy: forupdate (default), version or advisory.
//   - table: the lock table, "table" or "schema.table" (default
//     dlock_locks for forupdate, dlock_locks_<strategy> for the others; see
//     Tables); letters, digits and underscores only.
//   - migrate: create the table and its sequence if missing (default
//     true); with migrate=false they must exist (see Schema).
//
// The other parameters must be ones pgx or pgxpool know: the libpq
// connection keywords (sslmode, sslrootcert, connect_timeout,
// target_session_attrs, application_name, options, …), pgx's
// (statement_cache_capacity, default_query_exec_mode, …) and pgxpool's
// (pool_max_conns, pool_min_conns, pool_max_conn_idle_time, …). Any other
// parameter is an error, as in libpq: pgx would send it to the server as a
// setting, where a misspelt dlock parameter would fail late and obscurely.
// Server settings go through options=-c name=value, or search_path,
// timezone and client_encoding, which are accepted as they are.
// pool_max_conns defaults to 32 (each held forupdate or advisory lease
// pins one connection).
//
// Open connects (and creates the table) before it returns, so a wrong
// address or password fails there. The password never appears in an
// error.
package postgres

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/sqllock"
)

// URL schemes this package registers.
const (
	Scheme    = "postgres"
	SchemeAlt = "postgresql"
)

// DefaultTable is the lock table when Options.Table is empty.
const DefaultTable = sqllock.DefaultTable

// DefaultMaxConns is pool_max_conns of a pool opened from a URL that does
// not set it.
const DefaultMaxConns = 32

const cleanupTimeout = 5 * time.Second

func init() {
	dlock.Register(Scheme, openURL)
	dlock.Register(SchemeAlt, openURL)
}

// Options configure OpenLocker. A nil *Options, and every zero field,
// means the default.
type Options struct {
	// Strategy is "forupdate" (default), "version" or "advisory".
	Strategy string
	// Table is the lock table, "table" or "schema.table" (default
	// DefaultTable for forupdate, DefaultTable_<strategy> for the others:
	// one table serves one strategy). It is validated as identifiers and
	// quoted.
	Table string
	// NoMigrate: do not create the table and its sequence on first use.
	NoMigrate bool
}

func (o *Options) config(p *pgxpool.Pool, owned bool) (sqllock.Config, error) {
	if o == nil {
		o = &Options{}
	}
	return sqllock.NewConfig(dialect{}, &pool{p: p, owned: owned}, o.Strategy, o.Table, !o.NoMigrate)
}

// OpenLocker returns a Locker on an existing pool. Closing the Locker
// does not close the pool. Each held forupdate or advisory lease pins one
// of the pool's connections until it ends; size the pool for it. The
// table is created on first use unless opts.NoMigrate.
//
// OpenLocker returns an error wrapping dlock.ErrInvalidOption if p is
// nil or opts.Strategy or opts.Table is invalid; it makes no server call.
func OpenLocker(p *pgxpool.Pool, opts *Options) (*dlock.Locker, error) {
	if p == nil {
		return nil, fmt.Errorf("postgres: OpenLocker needs a pool: %w", driver.ErrInvalidOption)
	}
	cfg, err := opts.config(p, false)
	if err != nil {
		return nil, err
	}
	return dlock.NewLocker(sqllock.New(cfg)), nil
}

// Schema returns the statements that create the lock table and its
// sequence, for deployments that run migrations themselves (migrate=false).
func Schema(table string) ([]string, error) {
	t, err := sqllock.ParseTable(dialect{}, table)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range (dialect{}).Migrate(t) {
		if s.SQL != "BEGIN" && s.SQL != "COMMIT" && !strings.Contains(s.SQL, "pg_advisory") {
			out = append(out, s.SQL)
		}
	}
	return out, nil
}

// pgParams are the URL parameters handed to pgx: libpq's connection
// keywords, pgx's and pgxpool's own, and a few server settings.
var pgParams = []string{
	"host", "port", "dbname", "database", "user", "password", "passfile", "connect_timeout",
	"sslmode", "sslkey", "sslcert", "sslcertmode", "sslrootcert", "sslnegotiation", "sslpassword", "sslsni",
	"krbspn", "krbsrvname", "target_session_attrs", "service", "servicefile",
	"min_protocol_version", "max_protocol_version", "channel_binding", "require_auth",
	"application_name", "options", "search_path", "timezone", "client_encoding",
	"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode",
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime",
	"pool_max_conn_lifetime_jitter", "pool_max_conn_idle_time", "pool_health_check_period", "pool_ping_timeout",
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("postgres: %s: %w", fmt.Sprintf(format, args...), driver.ErrInvalidOption)
}

// parseURL splits a URL into dlock's options and pgxpool's config. The
// URL is read by driver.ParseURL and rebuilt, properly escaped, for pgx,
// with only the parameters of pgParams.
func parseURL(raw string) (*Options, *pgxpool.Config, error) {
	u, err := driver.ParseURL(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	if u.Scheme != Scheme && u.Scheme != SchemeAlt {
		return nil, nil, invalid("want a %s:// URL", Scheme)
	}
	q := u.Params
	opts := &Options{
		Strategy:  q.Enum("strategy", string(sqllock.ForUpdate), string(sqllock.ForUpdate), string(sqllock.Version), "advisory"),
		Table:     q.String("table", DefaultTable),
		NoMigrate: !q.Bool("migrate", true),
	}
	rest := q.Rest()
	for k := range rest {
		if slices.Contains(pgParams, k) {
			q.Has(k)
		}
	}
	if err := q.Err(); err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	host, err := url.PathUnescape(u.Host)
	if err != nil {
		return nil, nil, invalid("malformed percent-encoding in the host %q", u.Host)
	}
	pu := &url.URL{Scheme: Scheme, Host: host, Path: u.Path, RawQuery: rest.Encode()}
	switch {
	case u.HasPassword:
		pu.User = url.UserPassword(u.User, u.Password)
	case u.HasUserinfo:
		pu.User = url.User(u.User)
	}
	pc, err := pgxpool.ParseConfig(pu.String())
	if err != nil {
		return nil, nil, invalid("%v", err) // pgx redacts the password; dlock.Open scrubs the rest
	}
	if _, set := rest["pool_max_conns"]; !set {
		pc.MaxConns = DefaultMaxConns
	}
	return opts, pc, nil
}

func openURL(ctx context.Context, raw string) (driver.Locker, error) {
	opts, pc, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	cfg, err := opts.config(p, true)
	if err != nil {
		p.Close()
		return nil, err
	}
	return sqllock.Open(ctx, cfg, p.Ping)
}

// Execer runs a statement: *pgxpool.Pool, *pgx.Conn and pgx.Tx are.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// FencedUpdate is the resource side of fencing for a table of your own:
// it runs
//
//	UPDATE table SET <set>, fenceColumn = token WHERE (<where>) AND fenceColumn <= token
//
// with args for the placeholders $1…$n of set and where (the token is
// $n+1), and reports whether a row was written. A writer whose lease
// ended while it was paused carries a token lower than the one the next
// holder wrote, and its write matches no row. The current holder may write
// again (its token equals the stored one). table ("table" or
// "schema.table") and fenceColumn are validated and quoted; fenceColumn
// must be a bigint, 0 before the first write.
func FencedUpdate(ctx context.Context, db Execer, table, fenceColumn string, token uint64, set, where string, args ...any) (bool, error) {
	q, _, err := sqllock.FencedSQL(dialect{}, table, fenceColumn, set, where, len(args))
	if err != nil {
		return false, err
	}
	tag, err := db.Exec(ctx, q, append(args, int64(token))...)
	return err == nil && tag.RowsAffected() > 0, err
}
