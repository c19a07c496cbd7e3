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
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	cfg.Pool = &pool{db: db, multi: opts != nil && opts.MultiStatements}
	return dlock.NewLockerWith(sqllock.New(cfg), &dlock.Options{Observer: opts.observer()}), nil
}

func (o *Options) observer() dlock.Observer {
	if o == nil {
		return nil
	}
	return o.Observer
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

// parseURL turns a mysql:// URL into the core's validated config (without
// a pool) and go-sql-driver's config, whose MultiStatements the pool
// follows. It reads the URL with driver.ParseURL and fills the config
// itself: only the parameters read below reach go-sql-driver, each
// validated, so that no URL parameter can be executed as SQL.
func parseURL(raw string) (sqllock.Config, *gomysql.Config, error) {
	u, err := driver.ParseURL(raw)
	if err != nil {
		return sqllock.Config{}, nil, fmt.Errorf("mysql: %w", err)
	}
	if u.Scheme != Scheme {
		return sqllock.Config{}, nil, invalid("want mysql://user:password@host:port/database")
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
				return sqllock.Config{}, nil, invalid("parameter %s: unbalanced quote", name)
			}
		}
		if !re.MatchString(v) {
			return sqllock.Config{}, nil, invalid("parameter %s=%q: not a valid value of %s", name, v, name)
		}
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[name] = "'" + v + "'"
	}
	if err := q.Err(); err != nil {
		return sqllock.Config{}, nil, fmt.Errorf("mysql: %w", err)
	}
	for _, c := range []struct{ name, v string }{{"charset", charset}, {"collation", cfg.Collation}, {"tls", cfg.TLSConfig}, {"serverPubKey", cfg.ServerPubKey}} {
		if c.v != "" && !nameRE.MatchString(c.v) {
			return sqllock.Config{}, nil, invalid("parameter %s=%q: want a name of letters, digits, '_', '.' and '-'", c.name, c.v)
		}
	}
	if cfg.ConnectionAttributes != "" && !attrsRE.MatchString(cfg.ConnectionAttributes) {
		return sqllock.Config{}, nil, invalid("parameter connectionAttributes=%q: want key:value,key:value", cfg.ConnectionAttributes)
	}
	if loc != "" {
		if !locRE.MatchString(loc) {
			return sqllock.Config{}, nil, invalid("parameter loc=%q: want a time zone name", loc)
		}
		if cfg.Loc, err = time.LoadLocation(loc); err != nil {
			return sqllock.Config{}, nil, invalid("parameter loc=%q: unknown time zone", loc)
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
			return sqllock.Config{}, nil, invalid("multiStatements=true cannot be combined with session variables (%s)", strings.Join(slices.Sorted(maps.Keys(cfg.Params)), ", "))
		}
		multi = false
	}
	cfg.MultiStatements = multi
	if multi {
		cfg.InterpolateParams = true
	}

	cfg.User, cfg.Passwd = u.User, u.Password
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	switch host := u.Host; {
	case len(u.Hosts) > 1:
		return sqllock.Config{}, nil, invalid("one host only, not %d", len(u.Hosts))
	case host == "":
	case strings.HasSuffix(host, ")"):
		network, addr, _ := strings.Cut(strings.TrimSuffix(host, ")"), "(")
		if network != "tcp" && network != "tcp6" && network != "unix" {
			return sqllock.Config{}, nil, invalid("network %q: want tcp(host:port) or unix(/path)", network)
		}
		cfg.Net, cfg.Addr = network, addr
	default:
		cfg.Net, cfg.Addr = "tcp", host
	}
	lc, err := opts.config()
	return lc, cfg, err
}

func openURL(ctx context.Context, raw string) (driver.Locker, error) {
	lc, cfg, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	// go-sql-driver's default logger writes "[mysql] packets.go:58
	// unexpected EOF" to stderr when a connection breaks: this one drops
	// such lines, or hands them to the Locker's Observer.
	clog := driver.NewClientLog(raw)
	cfg.Logger = quietAborts{clog}
	cfg.DialFunc = dial // connections a context can abort (abort.go)
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, invalid("%v", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxIdleConns(32)
	lc.Pool = &pool{db: db, owned: true, multi: cfg.MultiStatements, log: clog}
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
	s, err := sqllock.FencedStmt(dialect{}, table, fenceColumn, token, set, where, args)
	if err != nil {
		return false, err
	}
	res, err := db.ExecContext(ctx, s.SQL, s.Args...)
	if err != nil {
		return false, err
	}
	rows, err := res.RowsAffected()
	return rows > 0, err
}
