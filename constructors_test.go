package dlock_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/mysql"
	"github.com/dlock-go/dlock/postgres"
	"github.com/dlock-go/dlock/redis"
	"github.com/dlock-go/dlock/zookeeper"
)

type discardZKLogger struct{}

func (discardZKLogger) Printf(string, ...any) {}

// TestConstructorsRejectBadOptions: every driver constructor that takes a
// client of the caller's refuses a bad option up front, as Go CDK's
// fileblob.OpenBucket does. No server is needed: the clients point at an
// unreachable port and are never used.
func TestConstructorsRejectBadOptions(t *testing.T) {
	rc := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rc.Close() })
	db, err := sql.Open("mysql", "u@tcp(127.0.0.1:1)/db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	pool, err := pgxpool.New(t.Context(), "postgres://u@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	conn, _, err := zk.Connect([]string{"127.0.0.1:1"}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(discardZKLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)

	nodes := []goredis.UniversalClient{rc, rc, rc}
	cases := []struct {
		driver, bad string
		open        func() (*dlock.Locker, error)
	}{
		{"redis", "OpenLocker: prefix with '{'", func() (*dlock.Locker, error) {
			return redis.OpenLocker(rc, &redis.Options{Prefix: "a{b"})
		}},
		{"redis", "OpenLocker: prefix with '}'", func() (*dlock.Locker, error) {
			return redis.OpenLocker(rc, &redis.Options{Prefix: "b}"})
		}},
		{"redis", "OpenLocker: nil client", func() (*dlock.Locker, error) { return redis.OpenLocker(nil, nil) }},
		{"redis", "OpenRedlock: prefix with '{'", func() (*dlock.Locker, error) {
			return redis.OpenRedlock(nodes, &redis.Options{Prefix: "a{b"})
		}},
		{"redis", "OpenRedlock: no clients", func() (*dlock.Locker, error) { return redis.OpenRedlock(nil, nil) }},
		{"redis", "OpenRedlock: a nil client", func() (*dlock.Locker, error) {
			return redis.OpenRedlock([]goredis.UniversalClient{rc, nil, rc}, nil)
		}},
		{"postgres", "unknown strategy", func() (*dlock.Locker, error) {
			return postgres.OpenLocker(pool, &postgres.Options{Strategy: "bogus"})
		}},
		{"postgres", "MySQL's native strategy", func() (*dlock.Locker, error) {
			return postgres.OpenLocker(pool, &postgres.Options{Strategy: "getlock"})
		}},
		{"postgres", "table with three parts", func() (*dlock.Locker, error) {
			return postgres.OpenLocker(pool, &postgres.Options{Table: "a.b.c"})
		}},
		{"postgres", "table that is SQL", func() (*dlock.Locker, error) {
			return postgres.OpenLocker(pool, &postgres.Options{Table: "t; DROP TABLE x"})
		}},
		{"postgres", "table too long", func() (*dlock.Locker, error) {
			return postgres.OpenLocker(pool, &postgres.Options{Table: strings.Repeat("t", 63)})
		}},
		{"postgres", "nil pool", func() (*dlock.Locker, error) { return postgres.OpenLocker(nil, nil) }},
		{"mysql", "unknown strategy", func() (*dlock.Locker, error) {
			return mysql.OpenLocker(db, &mysql.Options{Strategy: "advisory"})
		}},
		{"mysql", "table starting with a digit", func() (*dlock.Locker, error) {
			return mysql.OpenLocker(db, &mysql.Options{Table: "1locks"})
		}},
		{"mysql", "table with a dash", func() (*dlock.Locker, error) {
			return mysql.OpenLocker(db, &mysql.Options{Strategy: "getlock", Table: "app.lock-table"})
		}},
		{"mysql", "nil DB", func() (*dlock.Locker, error) { return mysql.OpenLocker(nil, nil) }},
		{"zookeeper", "SessionTimeout above MaxSessionTimeout", func() (*dlock.Locker, error) {
			return zookeeper.OpenLocker(conn, &zookeeper.Options{SessionTimeout: 600 * time.Hour})
		}},
		{"zookeeper", "negative SessionTimeout", func() (*dlock.Locker, error) {
			return zookeeper.OpenLocker(conn, &zookeeper.Options{SessionTimeout: -time.Second})
		}},
		{"zookeeper", "prefix under /zookeeper", func() (*dlock.Locker, error) {
			return zookeeper.OpenLocker(conn, &zookeeper.Options{Prefix: "/zookeeper/x"})
		}},
		{"zookeeper", "relative prefix", func() (*dlock.Locker, error) {
			return zookeeper.OpenLocker(conn, &zookeeper.Options{Prefix: "locks"})
		}},
		{"zookeeper", "unknown recipe", func() (*dlock.Locker, error) {
			return zookeeper.OpenLocker(conn, &zookeeper.Options{Recipe: "bogus"})
		}},
		{"zookeeper", "nil connection", func() (*dlock.Locker, error) { return zookeeper.OpenLocker(nil, nil) }},
	}
	for _, tc := range cases {
		t.Run(tc.driver+"/"+tc.bad, func(t *testing.T) {
			l, err := func() (l *dlock.Locker, err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panic: %v", r)
						t.Errorf("panicked (a bad option must be an error): %v", r)
					}
				}()
				return tc.open()
			}()
			if l != nil {
				_ = l.Close()
				t.Errorf("returned a Locker, want nil")
			}
			if !errors.Is(err, dlock.ErrInvalidOption) {
				t.Fatalf("error %v, want one wrapping ErrInvalidOption", err)
			}
			// The driver names itself first and wraps the sentinel; the
			// project's prefix is not the driver's to add: any "dlock:"
			// in the message is the sentinel's own text.
			msg := err.Error()
			if !strings.HasPrefix(msg, tc.driver+": ") || strings.Count(msg, "dlock:") != strings.Count(dlock.ErrInvalidOption.Error(), "dlock:") {
				t.Errorf("error %q, want it to start with %q and carry no \"dlock:\" of the driver's", msg, tc.driver+": ")
			}
		})
	}
}
