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
	openers["pg-rtt"] = openPGRTT
	openers["pg-forupdate-floor"] = openPGForUpdateFloor
	openers["pg-advisory-floor"] = openPGAdvisoryFloor
	openers["mysql-rtt"] = openMySQLRTT
	openers["mysql-forupdate-floor"] = openMySQLForUpdateFloor
	openers["mysql-getlock-floor"] = openMySQLGetLockFloor
	openers["pg-version-floor"] = openPGVersionFloor
	openers["mysql-version-floor"] = openMySQLVersionFloor
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

// --- PostgreSQL: SELECT 1; BEGIN + SELECT … FOR UPDATE / COMMIT; advisory ---

func pgConnect(ctx context.Context, t Target) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, t.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: connect failed", t.Name) // the error may hold the password
	}
	return c, nil
}

func openPGRTT(ctx context.Context, t Target) (Client, error) {
	c, err := pgConnect(ctx, t)
	if err != nil {
		return nil, err
	}
	return rttClient(func(ctx context.Context) error { _, err := c.Exec(ctx, "SELECT 1"); return err },
		func() error { return c.Close(context.Background()) }), nil
}

// sqlFloor is a SQL floor: acquire makes one attempt on the pinned
// connection; ensure inserts the name's row once per client (outside the
// steady state of the timed loop).
func sqlFloor(ensure func(ctx context.Context, name string) error,
	acquire func(ctx context.Context, name string) (release func(ctx context.Context) error, ok bool, err error),
	closeFn func() error) *retryClient {
	seen := map[string]bool{}
	return &retryClient{
		try: func(ctx context.Context, name string) (Held, bool, error) {
			if !seen[name] {
				if err := ensure(ctx, name); err != nil {
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
		close: closeFn,
	}
}

// leaseOwner returns a fresh owner value for the version floors.
func leaseOwner() string { return fmt.Sprintf("%016x", rand.Uint64()) }

// safeName checks that a name can be put into SQL text literally; the
// harness only makes names of letters, digits and '-'.
func safeName(name string) error {
	for _, r := range name {
		if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("bench: name %q is not [A-Za-z0-9-]", name)
		}
	}
	return nil
}

func openPGForUpdateFloor(ctx context.Context, t Target) (Client, error) {
	c, err := pgConnect(ctx, t)
	if err != nil {
		return nil, err
	}
	// Concurrent CREATE TABLE IF NOT EXISTS can collide on the catalog:
	// the loser's error is ignored and the INSERT below tells.
	_, _ = c.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+floorTable+" (name text PRIMARY KEY)")
	return sqlFloor(
		func(ctx context.Context, name string) error {
			_, err := c.Exec(ctx, "INSERT INTO "+floorTable+" (name) VALUES ($1) ON CONFLICT DO NOTHING", name)
			return err
		},
		func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
			if err := safeName(name); err != nil {
				return nil, false, err
			}
			_, err := c.Exec(ctx, "BEGIN; SELECT 1 FROM "+floorTable+" WHERE name = '"+name+"' FOR UPDATE", pgx.QueryExecModeSimpleProtocol)
			return func(ctx context.Context) error { _, err := c.Exec(ctx, "COMMIT"); return err }, err == nil, err
		},
		func() error { return c.Close(context.Background()) }), nil
}

// advisoryKey hashes a name to the 64-bit key of an advisory lock.
func advisoryKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

func openPGAdvisoryFloor(ctx context.Context, t Target) (Client, error) {
	c, err := pgConnect(ctx, t)
	if err != nil {
		return nil, err
	}
	return &retryClient{
		try: func(ctx context.Context, name string) (Held, bool, error) {
			key := advisoryKey(name)
			if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
				return nil, false, err
			}
			return noToken{release: func(ctx context.Context) error {
				_, err := c.Exec(ctx, "SELECT pg_advisory_unlock($1)", key)
				return err
			}}, true, nil
		},
		close: func() error { return c.Close(context.Background()) },
	}, nil
}

// --- MySQL/MariaDB: SELECT 1; BEGIN + SELECT … FOR UPDATE / COMMIT; GET_LOCK ---

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

func openMySQLRTT(ctx context.Context, t Target) (Client, error) {
	db, c, err := mysqlConn(ctx, t)
	if err != nil {
		return nil, err
	}
	return rttClient(func(ctx context.Context) error { _, err := c.ExecContext(ctx, "SELECT 1"); return err },
		func() error { c.Close(); return db.Close() }), nil
}

func openMySQLForUpdateFloor(ctx context.Context, t Target) (Client, error) {
	db, c, err := mysqlConn(ctx, t)
	if err != nil {
		return nil, err
	}
	_, _ = c.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+floorTable+" (name VARCHAR(191) PRIMARY KEY) ENGINE=InnoDB")
	return sqlFloor(
		func(ctx context.Context, name string) error {
			_, err := c.ExecContext(ctx, "INSERT IGNORE INTO "+floorTable+" (name) VALUES (?)", name)
			return err
		},
		func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
			_, err := c.ExecContext(ctx, "BEGIN; SELECT 1 FROM "+floorTable+" WHERE name = ? FOR UPDATE", name)
			return func(ctx context.Context) error { _, err := c.ExecContext(ctx, "COMMIT"); return err }, err == nil, err
		},
		func() error { c.Close(); return db.Close() }), nil
}

func openMySQLGetLockFloor(ctx context.Context, t Target) (Client, error) {
	db, c, err := mysqlConn(ctx, t)
	if err != nil {
		return nil, err
	}
	return &retryClient{
		try: func(ctx context.Context, name string) (Held, bool, error) {
			var got sql.NullInt64
			if err := c.QueryRowContext(ctx, "SELECT GET_LOCK(?, 10)", name).Scan(&got); err != nil {
				return nil, false, err
			}
			if got.Int64 != 1 {
				return nil, false, nil
			}
			return noToken{release: func(ctx context.Context) error {
				_, err := c.ExecContext(ctx, "DO RELEASE_LOCK(?)", name)
				return err
			}}, true, nil
		},
		close: func() error { c.Close(); return db.Close() },
	}, nil
}

// The version floors: an optimistic lease row taken by one conditional
// UPDATE (free or expired by the server's clock) and freed by another.

func openPGVersionFloor(ctx context.Context, t Target) (Client, error) {
	c, err := pgConnect(ctx, t)
	if err != nil {
		return nil, err
	}
	_, _ = c.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+leaseTable+
		" (name text PRIMARY KEY, owner text, expires timestamptz, version bigint NOT NULL DEFAULT 0)")
	return sqlFloor(
		func(ctx context.Context, name string) error {
			_, err := c.Exec(ctx, "INSERT INTO "+leaseTable+" (name) VALUES ($1) ON CONFLICT DO NOTHING", name)
			return err
		},
		func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
			owner := leaseOwner()
			tag, err := c.Exec(ctx, "UPDATE "+leaseTable+" SET owner = $2, expires = now() + interval '10 seconds', version = version + 1"+
				" WHERE name = $1 AND (owner IS NULL OR expires < now())", name, owner)
			if err != nil || tag.RowsAffected() != 1 {
				return nil, false, err
			}
			return func(ctx context.Context) error {
				_, err := c.Exec(ctx, "UPDATE "+leaseTable+" SET owner = NULL WHERE name = $1 AND owner = $2", name, owner)
				return err
			}, true, nil
		},
		func() error { return c.Close(context.Background()) }), nil
}

func openMySQLVersionFloor(ctx context.Context, t Target) (Client, error) {
	db, c, err := mysqlConn(ctx, t)
	if err != nil {
		return nil, err
	}
	_, _ = c.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+leaseTable+
		" (name VARCHAR(191) PRIMARY KEY, owner VARCHAR(64), expires DATETIME(6), version BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB")
	return sqlFloor(
		func(ctx context.Context, name string) error {
			_, err := c.ExecContext(ctx, "INSERT IGNORE INTO "+leaseTable+" (name) VALUES (?)", name)
			return err
		},
		func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
			owner := leaseOwner()
			res, err := c.ExecContext(ctx, "UPDATE "+leaseTable+" SET owner = ?, expires = NOW(6) + INTERVAL 10 SECOND, version = version + 1"+
				" WHERE name = ? AND (owner IS NULL OR expires < NOW(6))", owner, name)
			if err != nil {
				return nil, false, err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return nil, false, nil
			}
			return func(ctx context.Context) error {
				_, err := c.ExecContext(ctx, "UPDATE "+leaseTable+" SET owner = NULL WHERE name = ? AND owner = ?", name, owner)
				return err
			}, true, nil
		},
		func() error { c.Close(); return db.Close() }), nil
}
