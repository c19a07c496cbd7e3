package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// No URL parameter may execute SQL: go-sql-driver sends session
// variables as "SET name = value" and charset/collation as "SET NAMES",
// verbatim. Injection attempts are ErrInvalidOption and create nothing.
func TestURLParamsNeverRunSQL(t *testing.T) {
	srv := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, kv := range []string{
		"time_zone=%27%2B00:00%27%3BCREATE%20TABLE%20injected(i%20int)",
		"time_zone=%27%2B00:00%27,autocommit%3D(SELECT%201)",
		"sql_mode=%27%27%3BCREATE%20TABLE%20injected(i%20int)",
		"transaction_isolation=(SELECT%20SLEEP(1))",
		"charset=utf8mb4%3BCREATE%20TABLE%20injected(i%20int)",
		"collation=utf8mb4_bin%3BCREATE%20TABLE%20injected(i%20int)",
		"autocommit=0",
		"foreign_key_checks=0%3BCREATE%20TABLE%20injected(i%20int)",
		"allowAllFiles=true",
		"time_zone=%27%2B00:00%27&multiStatements=true",
	} {
		u := srv.URL + "?" + kv
		l, err := dlock.Open(ctx, u)
		if err == nil {
			l.Close()
			t.Errorf("%d: Open(%q) succeeded", i, u)
		} else if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("%d: Open(%q) = %v; want ErrInvalidOption", i, u, err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'injected'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("a URL parameter created a table")
	}
	// The session variables in their documented forms still work.
	for _, kv := range []string{"time_zone=%27%2B00:00%27", "time_zone=SYSTEM", "sql_mode=TRADITIONAL", "charset=utf8mb4&collation=utf8mb4_bin"} {
		l, err := dlock.Open(ctx, srv.URL+"?"+kv)
		if err != nil {
			t.Errorf("Open(?%s): %v", kv, err)
			continue
		}
		lease, err := l.TryAcquire(ctx, "inject/"+kv, nil)
		if err != nil {
			t.Errorf("?%s: acquire: %v", kv, err)
		} else {
			lease.Release(ctx)
		}
		l.Close()
	}
}

// FuzzSessionVariable: any value of a session variable either is refused
// with ErrInvalidOption or is a plain quoted word, never SQL.
func FuzzSessionVariable(f *testing.F) {
	for _, v := range []string{"'+00:00'", "'+00:00';CREATE TABLE x(i int)", "SYSTEM", "Europe/Paris", "a'b", "(SELECT 1)", "READ-COMMITTED", "x' OR '1"} {
		f.Add("time_zone", v)
		f.Add("sql_mode", v)
		f.Add("transaction_isolation", v)
		f.Add("charset", v)
	}
	f.Fuzz(func(t *testing.T, name, v string) {
		u := "mysql://u:p@127.0.0.1:1/db?" + url.QueryEscape(name) + "=" + url.QueryEscape(v)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		l, err := dlock.Open(ctx, u)
		if err == nil {
			l.Close()
			t.Fatalf("Open(%q) reached an unreachable server", u)
		}
		if errors.Is(err, dlock.ErrInvalidOption) {
			return
		}
		// Accepted: the value must be one word of the safe alphabet.
		inner := strings.Trim(v, "'")
		for _, c := range inner {
			if !(c == '_' || c == '-' || c == '+' || c == ':' || c == '/' || c == ',' || c == '.' ||
				'0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
				t.Errorf("Open accepted %s=%q (character %q)", name, v, c)
			}
		}
	})
}
