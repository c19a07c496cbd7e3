package floor

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// The semaphore floors: for each backend with semaphores, the fewest
// round trips that give what a dlock semaphore gives — at most N holders
// of a name, a fencing token that strictly increases across the permits
// granted for the name (durable before it is returned), and a permit that
// expires on the server's clock or with its holder's session — and that
// wait for a permit the way the backend allows, hand-written on one
// connection or session with nothing else (no keep-alive, no refusal of a
// mismatched N, no observer):
//
//	backend    take                                                     wait                         free
//	redis      EVALSHA: drop expired holders from a sorted set, add     BLPOP of a wake-up list      EVALSHA: ZREM + LPUSH
//	             ours if fewer than N (score = expiry, server clock)     (50 ms, for expiries)          wake-up
//	             + INCR token
//	zookeeper  multi: create ephemeral-sequential + setData parent     getChildren watch; held      delete
//	             (mzxid = our czxid, the token); held when among the     when among the N lowest
//	             N lowest sequence numbers
//	postgres   BEGIN + idle timeout + one of N slot rows FOR UPDATE     poll every 500 µs            COMMIT
//	             SKIP LOCKED (pipelined), then nextval on a 2nd
//	             connection (durable)
//	mysql      the same in one multi-statement request, the token       poll every 500 µs            COMMIT
//	             the name's counter+1 on a 2nd connection
//
// (etcd's, whose client stays out of this module, is dlockbench's.)
// Permits are granted in the order their holders' tokens say: ZooKeeper's
// N lowest sequence numbers hold, so a node is granted only after every
// node below it, and its czxid is above theirs.

// Semaphore is a semaphore floor on a connection (or session) of its
// own, used by one goroutine at a time.
type Semaphore struct {
	acquire func(ctx context.Context, name string, permits int) (*Grant, error)
	close   func() error
}

// Acquire blocks until it holds one of the permits of the semaphore
// name, or ctx ends (leaving nothing behind).
func (s *Semaphore) Acquire(ctx context.Context, name string, permits int) (*Grant, error) {
	return s.acquire(ctx, name, permits)
}

// Close closes the floor's connection, freeing what it holds.
func (s *Semaphore) Close() error { return s.close() }

// semFloors are the semaphore floors by backend, with what reports print.
var semFloors = map[string]struct {
	about string
	open  func(ctx context.Context, rawURL string, ttl time.Duration) (*Semaphore, error)
}{
	"redis": {"EVALSHA (drop expired holders of a sorted set, add ours if fewer than N, INCR token) / EVALSHA ZREM + LPUSH wake-up; " +
		"waiters BLPOP the wake-up list: 2 round trips uncontended", openRedisSemaphore},
	"zookeeper": {"multi (create ephemeral-sequential + setData parent: czxid token) / delete; held among the N lowest, " +
		"waiters watch the children: 2 round trips uncontended", openZooKeeperSemaphore},
	"postgres": {"pipelined BEGIN + idle timeout + one of N slot rows FOR UPDATE SKIP LOCKED, then nextval token on a 2nd " +
		"connection (durable) / COMMIT; waiters poll every 500µs: 3 round trips uncontended", openPostgresSemaphore},
	"mysql": {"BEGIN + wait_timeout + one of N slot rows FOR UPDATE SKIP LOCKED in one request, then counter+1 token on a 2nd " +
		"connection (durable) / COMMIT; waiters poll every 500µs: 3 round trips uncontended", openMySQLSemaphore},
}

// OpenSemaphore connects the semaphore floor of the server of rawURL
// (redis://, zk://, postgres://, mysql://).
func OpenSemaphore(ctx context.Context, rawURL string, opts *Options) (*Semaphore, error) {
	backend, err := backendOf(rawURL)
	if err != nil {
		return nil, err
	}
	f, ok := semFloors[backend]
	if !ok {
		return nil, fmt.Errorf("floor: no %s semaphore floor", backend)
	}
	return f.open(ctx, rawURL, opts.ttl())
}

// AboutSemaphore says what the semaphore floor of a backend sends and
// guarantees; "" when there is none.
func AboutSemaphore(backend string) string { return semFloors[backend].about }

// semTake is the Redis semaphore floor's take.
//
// KEYS[1]: the holders (a sorted set scored by expiry, in ms of the
// server's clock), KEYS[2]: the name's token counter. ARGV[1]: the
// holder's member, ARGV[2]: N, ARGV[3]: the TTL in milliseconds.
// Returns the token, or 0 when N permits are held.
var semTake = goredis.NewScript(`
local t = redis.call("time")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call("zremrangebyscore", KEYS[1], "-inf", now)
if redis.call("zcard", KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call("zadd", KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call("pexpire", KEYS[1], ARGV[3])
return redis.call("incr", KEYS[2])`)

// semFree is the Redis semaphore floor's release.
//
// KEYS[1]: the holders, KEYS[2]: the wake-up list. ARGV[1]: the holder's
// member, ARGV[2]: N. Returns 1 when the member held a permit (and one
// waiter is woken), 0 otherwise.
var semFree = goredis.NewScript(`
if redis.call("zrem", KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call("lpush", KEYS[2], 1)
redis.call("ltrim", KEYS[2], 0, tonumber(ARGV[2]) - 1)
redis.call("pexpire", KEYS[2], 60000)
return 1`)

// semWakeWait bounds a Redis waiter's BLPOP: a permit freed by its expiry
// pushes no wake-up.
const semWakeWait = 50 * time.Millisecond

// openRedisSemaphore: semTake takes a permit and its token in one
// EVALSHA; a waiter blocks on the wake-up list, which every release
// pushes to (kept at most N long: a wake-up nobody waited for costs a
// later waiter one extra attempt), and tries again.
func openRedisSemaphore(ctx context.Context, rawURL string, ttl time.Duration) (*Semaphore, error) {
	c, err := redisConn(rawURL)
	if err != nil {
		return nil, err
	}
	for _, s := range []*goredis.Script{semTake, semFree} {
		if err := s.Load(ctx, c).Err(); err != nil {
			c.Close()
			return nil, fmt.Errorf("floor: redis: script load: %w", err)
		}
	}
	ms := strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)
	owner, seq := rand.Text(), uint64(0)
	return &Semaphore{
		acquire: func(ctx context.Context, name string, permits int) (*Grant, error) {
			// One hash tag: the keys of a name share a Cluster slot.
			base := keyPrefix + "sem:{" + name + "}"
			holders, fence, wake := base, fencePrefix+base, base+":wake"
			seq++
			member := owner + strconv.FormatUint(seq, 36)
			for {
				token, err := semTake.Run(ctx, c, []string{holders, fence}, member, permits, ms).Uint64()
				if err != nil {
					return nil, err
				}
				if token > 0 {
					return &Grant{token: token, release: func(ctx context.Context) error {
						n, err := semFree.Run(ctx, c, []string{holders, wake}, member, permits).Int()
						if err == nil && n != 1 {
							err = ErrNotHeld
						}
						return err
					}}, nil
				}
				// BLPOP with a timeout in seconds, fractions allowed (go-redis's
				// BLPop rounds it up to a second).
				err = c.Do(ctx, "blpop", wake, strconv.FormatFloat(semWakeWait.Seconds(), 'f', 3, 64)).Err()
				if err != nil && !errors.Is(err, goredis.Nil) {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					return nil, err
				}
			}
		},
		close: c.Close,
	}, nil
}

// openZooKeeperSemaphore: the lock floor's multi creates our
// ephemeral-sequential node under the name's parent and writes the
// parent, whose mzxid in the reply is our node's czxid (the token) and
// whose child count, when at most N, says at once that we hold a permit.
// Otherwise we hold one once our node is among the N lowest: the waiter
// lists the children with a watch and waits for the next change. A
// waiter whose context ends deletes its node.
func openZooKeeperSemaphore(ctx context.Context, rawURL string, _ time.Duration) (*Semaphore, error) {
	c, err := DialZooKeeper(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	acl := zk.WorldACL(zk.PermAll)
	seen := map[string]bool{}
	return &Semaphore{
		acquire: func(ctx context.Context, name string, permits int) (*Grant, error) {
			parent := zkNode("sem", name)
			if !seen[parent] {
				if _, err := c.Create(parent, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					return nil, err
				}
				seen[parent] = true
			}
			r, err := c.Multi(
				&zk.CreateRequest{Path: parent + "/n-", Acl: acl, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: parent, Version: -1})
			if err != nil {
				return nil, err
			}
			node, st := r[0].String, r[1].Stat
			g := &Grant{token: uint64(st.Mzxid), release: func(context.Context) error { return zkDelete(c, node) }}
			if int(st.NumChildren) <= permits {
				return g, nil
			}
			ours := node[strings.LastIndexByte(node, '/')+1:]
			for {
				kids, _, ev, err := c.ChildrenW(parent)
				if err != nil {
					return nil, errors.Join(err, zkDelete(c, node))
				}
				// Sequential names share the prefix and a fixed-width
				// counter: they sort as their numbers.
				slices.Sort(kids)
				if i, ok := slices.BinarySearch(kids, ours); !ok {
					return nil, fmt.Errorf("floor: zookeeper: our node %s is gone", node)
				} else if i < permits {
					return g, nil
				}
				select {
				case <-ev:
				case <-ctx.Done():
					zkDelete(c, node)
					return nil, ctx.Err()
				}
			}
		},
		close: func() error { c.Close(); return nil },
	}, nil
}

// semSlotTable holds the PostgreSQL semaphore floor's slot rows: N per
// name, one per permit.
const semSlotTable = "dlockbench_sem_slot"

// semPoll is how often a PostgreSQL waiter tries again: the server tells
// nobody that a row lock skipped by SKIP LOCKED was freed.
const semPoll = 500 * time.Microsecond

// semTakeTimeout bounds one PostgreSQL attempt.
const semTakeTimeout = 10 * time.Second

// openPostgresSemaphore: a permit is the row lock on one of the name's N
// slot rows, taken with FOR UPDATE SKIP LOCKED in a transaction left open
// on the pinned connection (its idle timeout ends a hung holder's), BEGIN,
// the timeout and the lock pipelined in one round trip; freed by COMMIT.
// The token is nextval on a second connection (durable before it is
// returned). A waiter tries again every semPoll.
func openPostgresSemaphore(ctx context.Context, rawURL string, ttl time.Duration) (*Semaphore, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	pw, _ := u.User.Password()
	c, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("floor: postgres: %w", scrub(err, pw))
	}
	fc, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		c.Close(context.Background())
		return nil, fmt.Errorf("floor: postgres: %w", scrub(err, pw))
	}
	closeAll := func() error {
		return errors.Join(c.Close(context.Background()), fc.Close(context.Background()))
	}
	// Concurrent CREATE … IF NOT EXISTS can collide on the catalog: the
	// loser's error is ignored and the INSERT tells.
	_, _ = c.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+semSlotTable+" (name text, slot int, PRIMARY KEY (name, slot))")
	_, _ = c.Exec(ctx, postgres.fenceDDL)
	idle := pgIdle(ttl)
	seen := map[string]int{}
	take := func(ctx context.Context, name string, permits int) (bool, error) {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue("SELECT set_config('idle_in_transaction_session_timeout', $1, true)", idle)
		b.Queue("SELECT slot FROM "+semSlotTable+" WHERE name = $1 AND slot < $2 LIMIT 1 FOR UPDATE SKIP LOCKED", name, permits)
		br := c.SendBatch(ctx, b)
		_, err := br.Exec()
		if err == nil {
			_, err = br.Exec()
		}
		var slot int
		if err == nil {
			err = br.QueryRow().Scan(&slot)
		}
		err = errors.Join(err, br.Close())
		if errors.Is(err, pgx.ErrNoRows) {
			_, err = c.Exec(ctx, "ROLLBACK")
			return false, err
		}
		if err != nil {
			_, rbErr := c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
			return false, errors.Join(err, rbErr)
		}
		return true, nil
	}
	return &Semaphore{
		acquire: func(ctx context.Context, name string, permits int) (*Grant, error) {
			if seen[name] < permits {
				if _, err := c.Exec(ctx, "INSERT INTO "+semSlotTable+" (name, slot) SELECT $1, generate_series(0, $2 - 1) ON CONFLICT DO NOTHING", name, permits); err != nil {
					return nil, err
				}
				seen[name] = permits
			}
			if err := pollTake(ctx, func(ctx context.Context) (bool, error) { return take(ctx, name, permits) }); err != nil {
				return nil, err
			}
			free := func(ctx context.Context) error { _, err := c.Exec(ctx, "COMMIT"); return err }
			var token int64
			if err := fc.QueryRow(ctx, postgres.nextFence).Scan(&token); err != nil {
				return nil, errors.Join(err, free(context.WithoutCancel(ctx)))
			}
			return &Grant{token: uint64(token), release: free}, nil
		},
		close: closeAll,
	}, nil
}

// openMySQLSemaphore is the PostgreSQL floor's recipe in MySQL's SQL
// (MySQL 8, MariaDB 10.6 and later have SKIP LOCKED): BEGIN, the
// session's wait_timeout and the slot row FOR UPDATE SKIP LOCKED in one
// multi-statement round trip, COMMIT (and the timeout put back) to free;
// the token is the name's counter+1 on a second connection (durable
// before it is returned). A waiter tries again every semPoll.
func openMySQLSemaphore(ctx context.Context, rawURL string, ttl time.Duration) (*Semaphore, error) {
	db, c, err := myPinnedConn(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	fc, err := DialSQL(ctx, rawURL)
	if err != nil {
		c.Close()
		db.Close()
		return nil, err
	}
	closeAll := func() error { return errors.Join(c.Close(), db.Close(), fc.close()) }
	_, _ = c.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+semSlotTable+" (name VARCHAR(191), slot INT, PRIMARY KEY (name, slot)) ENGINE=InnoDB")
	_, _ = fc.exec(ctx, mySQL.fenceDDL)
	idle := myIdle(ttl)
	seen := map[string]int{}
	take := func(ctx context.Context, name string, permits int) (bool, error) {
		rows, err := c.QueryContext(ctx, "BEGIN; SET SESSION wait_timeout = ?; SELECT slot FROM "+semSlotTable+
			" WHERE name = ? AND slot < ? LIMIT 1 FOR UPDATE SKIP LOCKED", idle, name, permits)
		if err != nil {
			_, rbErr := c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK; SET SESSION wait_timeout = DEFAULT")
			return false, errors.Join(err, rbErr)
		}
		got := false
		for {
			for rows.Next() {
				got = true
			}
			if !rows.NextResultSet() {
				break
			}
		}
		err = errors.Join(rows.Err(), rows.Close())
		if err == nil && !got {
			_, err = c.ExecContext(ctx, "ROLLBACK; SET SESSION wait_timeout = DEFAULT")
			return false, err
		}
		return got, err
	}
	return &Semaphore{
		acquire: func(ctx context.Context, name string, permits int) (*Grant, error) {
			if seen[name] < permits {
				// A read that takes no lock first: an INSERT IGNORE of a
				// row another holder has locked would wait for it.
				var have int
				if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+semSlotTable+" WHERE name = ? AND slot < ?", name, permits).Scan(&have); err != nil {
					return nil, err
				}
				for i := range permits {
					if have == permits {
						break
					}
					if _, err := c.ExecContext(ctx, "INSERT IGNORE INTO "+semSlotTable+" (name, slot) VALUES (?, ?)", name, i); err != nil {
						return nil, err
					}
				}
				if n, err := fc.value(ctx, mySQL.hasFence, name); err != nil {
					return nil, err
				} else if n == 0 {
					if _, err := fc.exec(ctx, mySQL.insertFence, name); err != nil {
						return nil, err
					}
				}
				seen[name] = permits
			}
			if err := pollTake(ctx, func(ctx context.Context) (bool, error) { return take(ctx, name, permits) }); err != nil {
				return nil, err
			}
			free := func(ctx context.Context) error {
				_, err := c.ExecContext(ctx, "COMMIT; SET SESSION wait_timeout = DEFAULT")
				return err
			}
			token, ok, err := fc.token(ctx, mySQL.nextFence, name)
			if err == nil && !ok {
				err = fmt.Errorf("floor: no token for %q", name)
			}
			if err != nil {
				return nil, errors.Join(err, free(context.WithoutCancel(ctx)))
			}
			return &Grant{token: token, release: free}, nil
		},
		close: closeAll,
	}, nil
}

// myPinnedConn opens one pinned MySQL connection from a
// mysql://user:password@host/db URL, with the settings that save round
// trips: parameters interpolated by the client, several statements per
// request. The password never appears in its errors.
func myPinnedConn(ctx context.Context, rawURL string) (*sql.DB, *sql.Conn, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, nil, err
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
		return nil, nil, fmt.Errorf("floor: mysql: %w", scrub(err, cfg.Passwd))
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(1)
	c, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("floor: mysql: %w", scrub(err, cfg.Passwd))
	}
	return db, c, nil
}

// pollTake calls take until it takes a slot, every semPoll. Each call has
// its own semTakeTimeout and is not cancelled half-way (pgx closes a
// connection whose query is cancelled; for MySQL a cancelled query breaks
// the connection): ctx is checked between attempts.
func pollTake(ctx context.Context, take func(context.Context) (bool, error)) error {
	for {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), semTakeTimeout)
		ok, err := take(tctx)
		cancel()
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(semPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}
