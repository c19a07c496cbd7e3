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
	// Observer sees the Locker's events (dlock.Options.Observer).
	Observer dlock.Observer
}

// config validates o into the core's Config, without a pool yet.
func (o *Options) config() (sqllock.Config, error) {
	if o == nil {
		o = &Options{}
	}
	return sqllock.NewConfig(dialect{}, o.Strategy, o.Table, !o.NoMigrate)
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
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	cfg.Pool = newPool(p, false)
	return dlock.NewLockerWith(sqllock.New(cfg), &dlock.Options{Observer: opts.observer()}), nil
}

func (o *Options) observer() dlock.Observer {
	if o == nil {
		return nil
	}
	return o.Observer
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

// parseURL splits a URL into the core's validated config (without a
// pool) and pgxpool's config. The
// URL is read by driver.ParseURL and rebuilt, properly escaped, for pgx,
// with only the parameters of pgParams.
func parseURL(raw string) (sqllock.Config, *pgxpool.Config, error) {
	u, err := driver.ParseURL(raw)
	if err != nil {
		return sqllock.Config{}, nil, fmt.Errorf("postgres: %w", err)
	}
	if u.Scheme != Scheme && u.Scheme != SchemeAlt {
		return sqllock.Config{}, nil, invalid("want a %s:// URL", Scheme)
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
		return sqllock.Config{}, nil, fmt.Errorf("postgres: %w", err)
	}
	host, err := url.PathUnescape(u.Host)
	if err != nil {
		return sqllock.Config{}, nil, invalid("malformed percent-encoding in the host %q", u.Host)
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
		return sqllock.Config{}, nil, invalid("%v", err) // pgx redacts the password; dlock.Open scrubs the rest
	}
	if _, set := rest["pool_max_conns"]; !set {
		pc.MaxConns = DefaultMaxConns
	}
	cfg, err := opts.config()
	return cfg, pc, err
}

func openURL(ctx context.Context, raw string) (driver.Locker, error) {
	cfg, pc, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	cfg.Pool = newPool(p, true)
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
	s, err := sqllock.FencedStmt(dialect{}, table, fenceColumn, token, set, where, args)
	if err != nil {
		return false, err
	}
	tag, err := db.Exec(ctx, s.SQL, s.Args...)
	return err == nil && tag.RowsAffected() > 0, err
}
