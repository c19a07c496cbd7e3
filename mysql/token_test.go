package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/mysql"
)

// TestRowFenceTokens: version and getlock take a name's token from its
// row (the last token plus one, or the server's clock in microseconds
// when larger) in the grant's own statement. A name's tokens strictly
// increase even when its fence is far ahead of the clock (the statement
// must then add one, not fall back to the clock); a name first locked
// gets the clock, above the tokens of names locked before it.
func TestRowFenceTokens(t *testing.T) {
	srv := testenv.MySQL(t)
	db := openDB(t, srv.DSN)
	for _, s := range []string{"version", "getlock"} {
		t.Run(s, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			l := sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", s))
			take := func(name string) uint64 {
				t.Helper()
				ls, err := l.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: 5 * time.Second, NoKeepAlive: true})
				if err != nil {
					t.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
				return ls.Token()
			}
			name := fmt.Sprintf("fence/%s/%d", s, time.Now().UnixNano())
			first := take(name)
			if now := uint64(time.Now().UnixMicro()); first < now-uint64(time.Minute/time.Microsecond) || first > now+uint64(time.Minute/time.Microsecond) {
				t.Fatalf("a new name's first token %d is not the server's clock in microseconds (about %d)", first, now)
			}
			if second := take(name); second <= first {
				t.Fatalf("tokens %d then %d: not increasing", first, second)
			}
			// A fence far ahead of the clock goes on by one.
			ahead := first + 1_000_000_000_000
			if _, err := db.ExecContext(ctx, "UPDATE "+sqltest.Core(l).Table().Q+" SET fence = ? WHERE name = ?", ahead, name); err != nil {
				t.Fatal(err)
			}
			if got := take(name); got != ahead+1 {
				t.Fatalf("after fence %d: token %d, want %d", ahead, got, ahead+1)
			}
			if got := take(name); got != ahead+2 {
				t.Fatalf("next token %d, want %d", got, ahead+2)
			}
		})
	}
}

// TestGetLockSessionSettings: a getlock release puts the connection's own
// wait_timeout back, and a refused attempt changes nothing. The pool has
// one connection, so every step runs on the same session.
func TestGetLockSessionSettings(t *testing.T) {
	srv := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	other := sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", "getlock"))
	db := openDB(t, srv.DSN)
	db.SetMaxOpenConns(1)
	l, err := mysql.OpenLocker(db, &mysql.Options{Strategy: "getlock", MultiStatements: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const own = 4321 // the session's value, unlike any TTL here
	if _, err := db.ExecContext(ctx, "SET SESSION wait_timeout = ?", own); err != nil {
		t.Fatal(err)
	}
	check := func(after string) {
		t.Helper()
		var v int64
		if err := db.QueryRowContext(ctx, "SELECT @@SESSION.wait_timeout").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != own {
			t.Fatalf("after %s the session's wait_timeout is %d, want %d", after, v, own)
		}
	}
	name := fmt.Sprintf("settings/%d", time.Now().UnixNano())
	held, err := other.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: 7 * time.Second}); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held name: %v, want ErrNotAcquired", err)
	}
	check("a refused attempt")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ls, err := l.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: 7 * time.Second, NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		check("a release")
	}
}
