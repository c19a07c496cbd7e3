package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/obstest"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/redis"
)

const obsPassword = "obs-s3cret-pw"

// A keep-alive refresh that the server refuses (NOPERM: the ACL no longer
// lets the user run scripts) is
// reported with the server's error, then the loss at the deadline; no
// event holds the URL's password.
func TestObserverServerError(t *testing.T) {
	srv := testenv.NewRedis(t, nil)
	ctx := testenv.Context(t, time.Minute)
	// The password is set once the server is up (testenv's readiness
	// check does not authenticate), and taken off for its clean-up.
	if err := goredis.NewClient(&goredis.Options{Addr: srv.Addr}).ConfigSet(ctx, "requirepass", obsPassword).Err(); err != nil {
		t.Fatal(err)
	}
	url := "redis://:" + obsPassword + "@" + srv.Addr + "/0"
	rec := &obstest.Recorder{}
	l, err := dlock.OpenWith(ctx, url, &dlock.Options{Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Password: obsPassword})
	defer raw.Close()
	defer raw.ConfigSet(context.Background(), "requirepass", "")

	ls, err := l.Acquire(ctx, "obs/oom", &dlock.AcquireOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(ctx, "ACL", "SETUSER", "default", "-evalsha", "-eval").Err(); err != nil {
		t.Fatal(err)
	}
	defer raw.Do(context.Background(), "ACL", "SETUSER", "default", "+@all")
	select {
	case <-ls.Done():
	case <-ctx.Done():
		t.Fatalf("the lease outlived refreshes the server refused: %v", rec.Events(dlock.EventRefresh))
	}
	if !errors.Is(ls.Err(), dlock.ErrLockLost) {
		t.Fatalf("lease ended with %v", ls.Err())
	}
	var failed []dlock.Event
	for _, e := range rec.Events(dlock.EventRefresh) {
		if e.Err != nil {
			failed = append(failed, e)
		}
	}
	if len(failed) == 0 || !strings.Contains(failed[0].Err.Error(), "NOPERM") || failed[0].Outcome() != "error" || failed[0].Backend != "redis" {
		t.Fatalf("failed refreshes = %+v, want the server's NOPERM error", failed)
	}
	lost := rec.WaitFor(t, dlock.EventLost, 1)
	if len(lost) != 1 || lost[0].Name != "obs/oom" || lost[0].Margin > 0 {
		t.Errorf("lost events = %+v, want one, at the deadline", lost)
	}
	if text := rec.Text(); strings.Contains(text, obsPassword) {
		t.Errorf("an event holds the URL's password:\n%s", text)
	}
}

// go-redis logs through the one process-wide logger: redis.ClientLog
// routes its lines to an Observer, and a failed dial then prints nothing
// on stderr (the control, with go-redis's default logger, does).
func TestClientLog(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	dead := "127.0.0.1:1" // nothing listens on port 1
	dial := func() {
		c := goredis.NewClient(&goredis.Options{Addr: dead, DialTimeout: 100 * time.Millisecond, DialerRetries: 1})
		defer c.Close()
		if err := c.Ping(ctx).Err(); err == nil {
			t.Error("a ping to a closed port succeeded")
		}
	}
	if out := obstest.CaptureStderr(t, dial); !strings.Contains(out, "failed to dial") {
		t.Fatalf("control: go-redis's default logger printed %q, want its dial failure", out)
	}
	rec := &obstest.Recorder{}
	goredis.SetLogger(redis.ClientLog(rec))
	t.Cleanup(func() { goredis.SetLogger(redis.Logger()) })
	if out := obstest.CaptureStderr(t, dial); out != "" {
		t.Errorf("with redis.ClientLog, go-redis printed %q to stderr", out)
	}
	logs := rec.Events(dlock.EventClientLog)
	if len(logs) == 0 || !strings.Contains(logs[0].Message, "failed to dial") || logs[0].Backend != "redis" {
		t.Errorf("client log events = %+v", logs)
	}
}

// A Locker opened from a URL keeps go-redis's lines about its own failed
// dials off stderr: they go to its Observer, or nowhere without one,
// while a go-redis client of the application still prints them as
// go-redis's default logger does (the logger this package installs).
func TestURLClientDialFailures(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	raw := "redis://:" + obsPassword + "@127.0.0.1:1/0?dial_timeout=100ms&max_retries=0" // nothing listens on port 1
	try := func(opts *dlock.Options) {
		l, err := dlock.OpenWith(ctx, raw, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := l.TryAcquire(ctx, "dial", nil); err == nil {
			t.Error("TryAcquire through a closed port succeeded")
		}
	}
	if out := obstest.CaptureStderr(t, func() { try(nil) }); out != "" {
		t.Errorf("a Locker without an Observer: go-redis printed %q to stderr", out)
	}
	rec := &obstest.Recorder{}
	obstest.ClientLogsOffStderr(t, rec, "redis", "failed to dial", func() { try(&dlock.Options{Observer: rec}) })
	if strings.Contains(rec.Text(), obsPassword) {
		t.Errorf("an event holds the URL's password: %s", rec.Text())
	}
	// The application's own client: go-redis's default behaviour.
	out := obstest.CaptureStderr(t, func() {
		c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, DialerRetries: 1})
		defer c.Close()
		_ = c.Ping(ctx).Err()
	})
	if !strings.HasPrefix(out, "redis: ") || !strings.Contains(out, "failed to dial") || !strings.Contains(out, "pool.go:") {
		t.Errorf("an application's go-redis client printed %q, want go-redis's own line (prefix, file, message)", out)
	}
}

// BenchmarkObserver is one Acquire+Release on a single server without an
// Observer and with the slog adapter at a level that logs nothing. Run
// with -benchmem: their allocs/op must be equal, and those of a Locker
// from before the hook existed.
func BenchmarkObserver(b *testing.B) {
	ctx := context.Background()
	srv := testenv.Redis(b)
	disabled := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, c := range []struct {
		name string
		opts *dlock.Options
	}{
		{"none", nil},
		{"slog-disabled", &dlock.Options{Observer: dlock.NewSlogObserver(disabled)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := dlock.OpenWith(ctx, srv.URL, c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.ReportAllocs()
			for b.Loop() {
				ls, err := l.Acquire(ctx, "bench/observer", nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
