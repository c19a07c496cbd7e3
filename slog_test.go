package dlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memory"
)

// logLines opens a Locker on ns that logs at level to a JSON buffer.
func logLines(t *testing.T, ns *memory.Namespace, level slog.Level) (*dlock.Locker, func() []map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	var mu = make(chan struct{}, 1)
	w := writerFunc(func(p []byte) (int, error) {
		mu <- struct{}{}
		defer func() { <-mu }()
		return buf.Write(p)
	})
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	l := dlock.NewLockerWith(memory.OpenLocker(ns).Driver(), &dlock.Options{Observer: dlock.NewSlogObserver(slog.New(h))})
	t.Cleanup(func() { l.Close() })
	return l, func() []map[string]any {
		mu <- struct{}{}
		defer func() { <-mu }()
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			out = append(out, m)
		}
		return out
	}
}

// waitLine waits until a line has the message msg (a lease's Done closes
// before its loss is observed), or fails after 10s.
func waitLine(t *testing.T, lines func() []map[string]any, msg string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, l := range lines() {
			if l["msg"] == msg {
				return
			}
		}
	}
	t.Fatalf("no %q line after 10s: %v", msg, lines())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// The slog adapter logs each step at its level with the documented
// attribute names; a logger at Warn sees only what went wrong.
func TestSlogObserver(t *testing.T) {
	ctx := testCtx(t)
	ns := memory.NewNamespace()
	l, lines := logLines(t, ns, slog.LevelDebug)
	ls, err := l.Acquire(ctx, "slog/a", &dlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err = l.Acquire(ctx, "slog/b", &dlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ns.Revoke("slog/b")
	waitLine(t, lines, "dlock: lost")
	l.Close()

	type want struct{ msg, level string }
	wants := []want{
		{"dlock: attempt", "DEBUG"}, {"dlock: granted", "DEBUG"}, {"dlock: released", "DEBUG"},
		{"dlock: attempt", "DEBUG"}, {"dlock: granted", "DEBUG"}, {"dlock: lost", "ERROR"},
		{"dlock: closed", "INFO"},
	}
	got := lines()
	if len(got) != len(wants) {
		t.Fatalf("%d lines, want %d: %v", len(got), len(wants), got)
	}
	for i, w := range wants {
		if got[i]["msg"] != w.msg || got[i]["level"] != w.level || got[i]["backend"] != "memory" || got[i]["strategy"] != "in-process" {
			t.Errorf("line %d = %v, want %s at %s", i, got[i], w.msg, w.level)
		}
	}
	g := got[1]
	if g["name"] != "slog/a" || g["token"] != float64(1) || g["wait"] != true || g["id"] == nil || g["elapsed"] == nil {
		t.Errorf("granted line = %v", g)
	}
	lost := got[5]
	if !strings.Contains(lost["err"].(string), "lock lost") || lost["outcome"] != "lost" || lost["margin"].(float64) < float64(50*time.Second) {
		t.Errorf("lost line = %v", lost)
	}

	// At Warn, a healthy lease logs nothing; a lost one logs its loss.
	l, lines = logLines(t, ns, slog.LevelWarn)
	ls, err = l.Acquire(ctx, "slog/c", nil)
	if err != nil {
		t.Fatal(err)
	}
	ls.Release(ctx)
	ls, err = l.Acquire(ctx, "slog/d", nil)
	if err != nil {
		t.Fatal(err)
	}
	ns.Revoke("slog/d")
	waitLine(t, lines, "dlock: lost")
	if got := lines(); len(got) != 1 || got[0]["msg"] != "dlock: lost" {
		t.Errorf("lines at Warn = %v, want the loss alone", got)
	}
}

// No Observer, and the slog adapter at a level it does not log, add no
// allocation to an Acquire+Release (issue 17, part 8). The counts are
// exact: the same code path with and without the hook.
func TestObserverAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	ctx := context.Background()
	count := func(opts *dlock.Options) float64 {
		l := dlock.NewLockerWith(memory.OpenLocker(memory.NewNamespace()).Driver(), opts)
		defer l.Close()
		return testing.AllocsPerRun(2000, func() {
			ls, err := l.Acquire(ctx, "allocs", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	disabled := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	none := count(nil)
	withSlog := count(&dlock.Options{Observer: dlock.NewSlogObserver(disabled)})
	if withSlog > none {
		t.Errorf("Acquire+Release: %v allocations with the slog adapter at a disabled level, %v without an Observer: want no more", withSlog, none)
	}
	t.Logf("allocations per Acquire+Release: %v without an Observer, %v with slog at a disabled level", none, withSlog)
}

// BenchmarkObserver is BenchmarkAcquireRelease without an Observer, with
// the slog adapter at a level that logs nothing, and with it logging
// every step to io.Discard. Run with -benchmem: allocs/op of "none" and
// "slog-disabled" must be those of BenchmarkAcquireRelease before the hook.
func BenchmarkObserver(b *testing.B) {
	ctx := context.Background()
	disabled := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	enabled := slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, c := range []struct {
		name string
		opts *dlock.Options
	}{
		{"none", nil},
		{"slog-disabled", &dlock.Options{Observer: dlock.NewSlogObserver(disabled)}},
		{"slog-debug", &dlock.Options{Observer: dlock.NewSlogObserver(enabled)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := dlock.OpenWith(ctx, "mem://", c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.ReportAllocs()
			for b.Loop() {
				ls, err := l.Acquire(ctx, "bench/one", nil)
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

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
