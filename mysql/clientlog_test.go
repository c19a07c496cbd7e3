package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/netproxy"
	"github.com/dlock-go/dlock/internal/obstest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// A connection broken under a waiting GET_LOCK makes go-sql-driver log
// "[mysql] packets.go:58 unexpected EOF" to stderr with its default
// logger (the control, on a DB opened directly, proves the fault and the
// capture). A Locker opened from a URL prints nothing: its Observer gets
// the line, with the URL's password nowhere in any event.
func TestClientLogOffStderr(t *testing.T) {
	srv := testenv.MySQL(t)
	ctx := testenv.Context(t, time.Minute)
	proxy := netproxy.ForTest(t, srv.Addr)
	proxied := strings.Replace(srv.URL, srv.Addr, proxy.Addr(), 1)

	// breakWhile runs block (which waits on the server through the proxy)
	// and closes the proxy's connections under it.
	breakWhile := func(block func(context.Context) error) {
		bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- block(bctx) }()
		time.Sleep(300 * time.Millisecond) // the request is on the wire
		proxy.Redirect(srv.Addr)           // closes every connection
		if err := <-done; err == nil {
			t.Error("the blocked call succeeded across a broken connection")
		}
	}

	control := obstest.CaptureStderr(t, func() {
		db, err := sql.Open("mysql", strings.Replace(srv.DSN, srv.Addr, proxy.Addr(), 1))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		breakWhile(func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "DO SLEEP(10)")
			return err
		})
	})
	if !strings.Contains(control, "[mysql]") {
		t.Fatalf("control: go-sql-driver's default logger printed %q, want a [mysql] line: the fault does not provoke the log line", control)
	}

	holder, err := dlock.Open(ctx, testenv.WithParams(srv.URL, "strategy", "getlock"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	held, err := holder.Acquire(ctx, "clientlog", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	rec := &obstest.Recorder{}
	obstest.ClientLogsOffStderr(t, rec, "mysql", "EOF", func() {
		l, err := dlock.OpenWith(ctx, testenv.WithParams(proxied, "strategy", "getlock"), &dlock.Options{Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		breakWhile(func(ctx context.Context) error {
			_, err := l.Acquire(ctx, "clientlog", nil)
			return err
		})
		// And a Locker without an Observer: dropped.
		quiet, err := dlock.Open(ctx, testenv.WithParams(proxied, "strategy", "getlock"))
		if err != nil {
			t.Fatal(err)
		}
		defer quiet.Close()
		breakWhile(func(ctx context.Context) error {
			_, err := quiet.Acquire(ctx, "clientlog", nil)
			return err
		})
	})
	if text := rec.Text(); strings.Contains(text, testenv.Password) {
		t.Errorf("an event holds the URL's password:\n%s", text)
	}
}
