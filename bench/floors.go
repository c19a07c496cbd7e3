package bench

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// The floors: for each strategy, the fewest round trips that can take and
// free the lock, hand-written on one connection, with nothing else (no
// fencing, no keep-alive, no waiting). The raw round trips: one request
// that does nothing. Both run on the same server as the targets they are
// compared with, in the same run.
func init() {
	openers["redis-rtt"] = openRedisRTT
	openers["redis-floor"] = openRedisFloor
	openers["zk-rtt"] = openZKRTT
	openers["zk-floor"] = openZKFloor
	openers["pg-rtt"] = sqlOpener(pgConn, sqlRTT)
	openers["pg-forupdate-floor"] = sqlOpener(pgConn, forUpdateFloor)
	openers["pg-version-floor"] = sqlOpener(pgConn, versionFloor)
	openers["pg-advisory-floor"] = sqlOpener(pgConn, nativeFloor)
	openers["mysql-rtt"] = sqlOpener(myConn, sqlRTT)
	openers["mysql-forupdate-floor"] = sqlOpener(myConn, forUpdateFloor)
	openers["mysql-version-floor"] = sqlOpener(myConn, versionFloor)
	openers["mysql-getlock-floor"] = sqlOpener(myConn, nativeFloor)
}

// floorTable is the table the SQL row-lock floors lock rows of;
// leaseTable holds the version floors' lease rows.
const (
	floorTable = "dlockbench_floor"
	leaseTable = "dlockbench_lease"
)

var released = noToken{release: func(context.Context) error { return nil }}

// rttClient's Acquire is one round trip and its Release does nothing.
func rttClient(ping func(ctx context.Context) error, closeFn func() error) *retryClient {
	return &retryClient{
		try: func(ctx context.Context, _ string) (Held, bool, error) {
			return released, true, ping(ctx)
		},
		close: closeFn,
	}
}

// --- Redis: PING; SET NX PX + EVALSHA compare-and-delete ---

func redisOne(t Target) (*goredis.Client, error) {
	opt, err := goredis.ParseURL(t.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", t.Name, err)
	}
	opt.PoolSize = 1
	opt.MinIdleConns = 1
	return goredis.NewClient(opt), nil
}

func openRedisRTT(ctx context.Context, t Target) (Client, error) {
	c, err := redisOne(t)
	if err != nil {
		return nil, err
	}
	return rttClient(func(ctx context.Context) error { return c.Ping(ctx).Err() }, c.Close), nil
}

var redisDelIfOwner = goredis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func openRedisFloor(ctx context.Context, t Target) (Client, error) {
	c, err := redisOne(t)
	if err != nil {
		return nil, err
	}
	if err := redisDelIfOwner.Load(ctx, c).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("bench: %s: script load: %w", t.Name, err)
	}
	var seq uint64
	return &retryClient{
		try: func(ctx context.Context, name string) (Held, bool, error) {
			seq++
			key, val := "dlockbench:floor:"+name, fmt.Sprintf("v%d", seq)
			ok, err := c.SetNX(ctx, key, val, LeaseTTL).Result()
			if err != nil || !ok {
				return nil, false, err
			}
			return noToken{release: func(ctx context.Context) error {
				return redisDelIfOwner.EvalSha(ctx, c, []string{key}, val).Err()
			}}, true, nil
		},
		close: c.Close,
	}, nil
}

// --- ZooKeeper: exists; create ephemeral + delete ---

func zkConnect(t Target) (*zk.Conn, error) {
	u, err := url.Parse(t.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: bad URL", t.Name)
	}
	conn, events, err := zk.Connect(strings.Split(u.Host, ","), 10*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", t.Name, err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() {
					for range events {
					}
				}()
				return conn, nil
			}
		case <-timeout:
			conn.Close()
			return nil, fmt.Errorf("bench: %s: no ZooKeeper session within 10s", t.Name)
		}
	}
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func openZKRTT(ctx context.Context, t Target) (Client, error) {
	c, err := zkConnect(t)
	if err != nil {
		return nil, err
	}
	return rttClient(func(context.Context) error { _, _, err := c.Exists("/"); return err },
		func() error { c.Close(); return nil }), nil
}

func openZKFloor(ctx context.Context, t Target) (Client, error) {
	c, err := zkConnect(t)
	if err != nil {
		return nil, err
	}
	return &retryClient{
		try: func(ctx context.Context, name string) (Held, bool, error) {
			p := "/dlockbench-floor-" + name
			_, err := c.Create(p, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			if err == zk.ErrNodeExists {
				return nil, false, nil
			}
			if err != nil {
				return nil, false, err
			}
			return noToken{release: func(context.Context) error { return c.Delete(p, -1) }}, true, nil
		},
		close: func() error { c.Close(); return nil },
	}, nil
}

// --- SQL: SELECT 1; BEGIN + SELECT … FOR UPDATE / COMMIT; lease row; native locks ---

// sqlConn is one pinned connection to PostgreSQL or MySQL and the dialect
// of the statements the SQL floors send. The floors themselves are
// written once, over it.
type sqlConn struct {
	// exec runs one statement and returns the rows it affected; multi runs
	// several statements sent together in one round trip.
	exec  func(ctx context.Context, query string, args ...any) (int64, error)
	multi func(ctx context.Context, query string, args ...any) error
	// value runs a query returning one integer (0 for NULL); text one string.
	value func(ctx context.Context, query string, args ...any) (int64, error)
	text  func(ctx context.Context, query string) (string, error)
	close func() error

	floorDDL, insertFloor, lockRow string // forupdate: row table, row insert, BEGIN + SELECT … FOR UPDATE
	leaseDDL, insertLease          string // version: lease table and row insert
	takeLease, freeLease           string // version: args (owner, name)
	lockNative, unlockNative       string // advisory / GET_LOCK: arg key; lockNative returns 1 when granted
	nativeKey                      func(name string) any
}

func pgConn(ctx context.Context, t Target) (*sqlConn, error) {
	c, err := pgConnect(ctx, t)
	if err != nil {
		return nil, err
	}
	return &sqlConn{
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
		close:        func() error { return c.Close(context.Background()) },
		floorDDL:     "CREATE TABLE IF NOT EXISTS " + floorTable + " (name text PRIMARY KEY)",
		insertFloor:  "INSERT INTO " + floorTable + " (name) VALUES ($1) ON CONFLICT DO NOTHING",
		lockRow:      "BEGIN; SELECT 1 FROM " + floorTable + " WHERE name = $1 FOR UPDATE",
		leaseDDL:     "CREATE TABLE IF NOT EXISTS " + leaseTable + " (name text PRIMARY KEY, owner text, expires timestamptz, version bigint NOT NULL DEFAULT 0)",
		insertLease:  "INSERT INTO " + leaseTable + " (name) VALUES ($1) ON CONFLICT DO NOTHING",
		takeLease:    "UPDATE " + leaseTable + " SET owner = $1, expires = now() + interval '10 seconds', version = version + 1 WHERE name = $2 AND (owner IS NULL OR expires < now())",
		freeLease:    "UPDATE " + leaseTable + " SET owner = NULL WHERE owner = $1 AND name = $2",
		lockNative:   "SELECT 1::bigint FROM (SELECT pg_advisory_lock($1)) AS l",
		unlockNative: "SELECT pg_advisory_unlock($1)",
		nativeKey:    func(name string) any { return advisoryKey(name) },
	}, nil
}

func myConn(ctx context.Context, t Target) (*sqlConn, error) {
	db, c, err := mysqlConn(ctx, t)
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
	return &sqlConn{
		exec: exec,
		multi: func(ctx context.Context, q string, args ...any) error {
			_, err := exec(ctx, q, args...) // multiStatements=true
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
		close:        func() error { c.Close(); return db.Close() },
		floorDDL:     "CREATE TABLE IF NOT EXISTS " + floorTable + " (name VARCHAR(191) PRIMARY KEY) ENGINE=InnoDB",
		insertFloor:  "INSERT IGNORE INTO " + floorTable + " (name) VALUES (?)",
		lockRow:      "BEGIN; SELECT 1 FROM " + floorTable + " WHERE name = ? FOR UPDATE",
		leaseDDL:     "CREATE TABLE IF NOT EXISTS " + leaseTable + " (name VARCHAR(191) PRIMARY KEY, owner VARCHAR(64), expires DATETIME(6), version BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
		insertLease:  "INSERT IGNORE INTO " + leaseTable + " (name) VALUES (?)",
		takeLease:    "UPDATE " + leaseTable + " SET owner = ?, expires = NOW(6) + INTERVAL 10 SECOND, version = version + 1 WHERE name = ? AND (owner IS NULL OR expires < NOW(6))",
		freeLease:    "UPDATE " + leaseTable + " SET owner = NULL WHERE owner = ? AND name = ?",
		lockNative:   "SELECT GET_LOCK(?, 10)",
		unlockNative: "DO RELEASE_LOCK(?)",
		nativeKey:    func(name string) any { return name },
	}, nil
}

func pgConnect(ctx context.Context, t Target) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, t.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: connect failed", t.Name) // the error may hold the password
	}
	return c, nil
}

// mysqlConn opens one pinned connection from a mysql:// URL.
func mysqlConn(ctx context.Context, t Target) (*sql.DB, *sql.Conn, error) {
	u, err := url.Parse(t.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %s: bad URL", t.Name)
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
		return nil, nil, fmt.Errorf("bench: %s: bad configuration", t.Name)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(1)
	c, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("bench: %s: connect failed", t.Name)
	}
	return db, c, nil
}

// sqlOpener adapts a SQL floor to an opener for a dialect.
func sqlOpener(connect func(context.Context, Target) (*sqlConn, error), floor func(ctx context.Context, c *sqlConn) (*retryClient, error)) opener {
	return func(ctx context.Context, t Target) (Client, error) {
		c, err := connect(ctx, t)
		if err != nil {
			return nil, err
		}
		rc, err := floor(ctx, c)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("bench: %s: %w", t.Name, err)
		}
		return rc, nil
	}
}

func sqlRTT(ctx context.Context, c *sqlConn) (*retryClient, error) {
	return rttClient(func(ctx context.Context) error { _, err := c.exec(ctx, "SELECT 1"); return err }, c.close), nil
}

// sqlFloor makes a floor client: acquire makes one attempt on the pinned
// connection; ensure inserts the name's row once per client (outside the
// steady state of the timed loop).
func sqlFloor(c *sqlConn, ensure string,
	acquire func(ctx context.Context, name string) (release func(ctx context.Context) error, ok bool, err error)) *retryClient {
	seen := map[string]bool{}
	return &retryClient{
		try: func(ctx context.Context, name string) (Held, bool, error) {
			if ensure != "" && !seen[name] {
				if _, err := c.exec(ctx, ensure, name); err != nil {
					return nil, false, err
				}
				seen[name] = true
			}
			rel, ok, err := acquire(ctx, name)
			if err != nil || !ok {
				return nil, false, err
			}
			return noToken{release: rel}, true, nil
		},
		close: c.close,
	}
}

// forUpdateFloor: BEGIN and SELECT … FOR UPDATE sent together (one round
// trip), COMMIT to free.
func forUpdateFloor(ctx context.Context, c *sqlConn) (*retryClient, error) {
	// Concurrent CREATE TABLE IF NOT EXISTS can collide on the catalog:
	// the loser's error is ignored and the INSERT tells.
	_, _ = c.exec(ctx, c.floorDDL)
	commit := func(ctx context.Context) error { _, err := c.exec(ctx, "COMMIT"); return err }
	return sqlFloor(c, c.insertFloor, func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
		err := c.multi(ctx, c.lockRow, name)
		return commit, err == nil, err
	}), nil
}

// versionFloor: an optimistic lease row taken by one conditional UPDATE
// (free or expired by the server's clock) and freed by another.
func versionFloor(ctx context.Context, c *sqlConn) (*retryClient, error) {
	_, _ = c.exec(ctx, c.leaseDDL)
	return sqlFloor(c, c.insertLease, func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
		owner := leaseOwner()
		n, err := c.exec(ctx, c.takeLease, owner, name)
		if err != nil || n != 1 {
			return nil, false, err
		}
		return func(ctx context.Context) error { _, err := c.exec(ctx, c.freeLease, owner, name); return err }, true, nil
	}), nil
}

// nativeFloor: the server's own named locks (pg_advisory_lock, GET_LOCK).
func nativeFloor(ctx context.Context, c *sqlConn) (*retryClient, error) {
	return sqlFloor(c, "", func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
		key := c.nativeKey(name)
		n, err := c.value(ctx, c.lockNative, key)
		if err != nil || n != 1 {
			return nil, false, err
		}
		return func(ctx context.Context) error { _, err := c.exec(ctx, c.unlockNative, key); return err }, true, nil
	}), nil
}

// leaseOwner returns a fresh owner value for the version floors.
func leaseOwner() string { return fmt.Sprintf("%016x", rand.Uint64()) }

// advisoryKey hashes a name to the 64-bit key of an advisory lock.
func advisoryKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}
