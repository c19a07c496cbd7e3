package dlock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testenv"
	_ "github.com/dlock-go/dlock/memory"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// errorShape checks the rule "errors say each thing once": one "dlock:"
// prefix, the driver's name at most once, and errors.Is still finding the
// sentinel.
func errorShape(t *testing.T, what string, err, sentinel error, driverName, rawURL string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one wrapping %v", what, sentinel)
		return
	}
	// The URL (redacted) is data: its scheme and user may spell "redis:"
	// or "dlock:".
	msg := strings.ReplaceAll(err.Error(), driver.Redact(rawURL), "URL")
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: %q does not wrap %q", what, err.Error(), sentinel)
	}
	if !strings.HasPrefix(msg, "dlock: ") || strings.Count(msg, "dlock:") != 1 {
		t.Errorf("%s: %q does not say \"dlock:\" exactly once, at the start", what, err.Error())
	}
	if n := strings.Count(msg, driverName+":"); n > 1 {
		t.Errorf("%s: %q names the driver %q %d times", what, err.Error(), driverName, n)
	}
	if strings.Count(msg, sentinel.Error()) != 1 {
		t.Errorf("%s: %q does not say %q exactly once", what, err.Error(), sentinel.Error())
	}
}

// Every driver, opened through its URL against a real server, says each
// thing once in every kind of error: a bad option, a bad name, a held lock,
// a lease no longer held, a closed Locker, an unsupported call; context
// errors come back unwrapped.
func TestErrorsSayEachThingOnce(t *testing.T) {
	type target struct{ name, url string }
	targets := []target{{"memory", "mem://errshape"}}
	var nodes []string
	for _, n := range testenv.RedisNodes(t, 3) {
		nodes = append(nodes, n.Addr)
	}
	targets = append(targets,
		target{"redis", testenv.Redis(t).URL},
		target{"redis", "redlock://" + strings.Join(nodes, ",")},
		target{"redis", testenv.RedisCluster(t).URL})
	targets = append(targets, target{"zookeeper", testenv.ZooKeeper(t).URL})
	pg, my := testenv.Postgres(t).URL, testenv.MySQL(t).URL
	for _, s := range []string{"forupdate", "version", "advisory"} {
		targets = append(targets, target{"postgres", withParam(pg, "strategy", s) + "&table=errshape_" + s})
	}
	for _, s := range []string{"forupdate", "version", "getlock"} {
		targets = append(targets, target{"mysql", withParam(my, "strategy", s) + "&table=errshape_" + s})
	}
	for _, tg := range targets {
		t.Run(strings.SplitN(tg.url, ":", 2)[0]+"/"+strategyOf(tg.url), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()

			bad := withParam(tg.url, "no_such_parameter", "1")
			_, err := dlock.Open(ctx, bad)
			errorShape(t, "Open with an unknown parameter", err, dlock.ErrInvalidOption, tg.name, bad)

			a, err := dlock.Open(ctx, tg.url)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := dlock.Open(ctx, tg.url)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()

			_, err = a.TryAcquire(ctx, "x", &dlock.AcquireOptions{TTL: time.Nanosecond})
			errorShape(t, "TryAcquire with a TTL out of range", err, dlock.ErrInvalidOption, tg.name, tg.url)
			_, err = a.TryAcquire(ctx, "", nil)
			errorShape(t, "TryAcquire of an empty name", err, dlock.ErrInvalidName, tg.name, tg.url)

			name := "errshape-" + t.Name()
			ls, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.TryAcquire(ctx, name, nil)
			errorShape(t, "TryAcquire of a held name", err, dlock.ErrNotAcquired, tg.name, tg.url)
			if _, err := b.Inspect(ctx, name); errors.Is(err, dlock.ErrUnsupported) {
				errorShape(t, "Inspect", err, dlock.ErrUnsupported, tg.name, tg.url)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
			errorShape(t, "Err after Release", ls.Err(), dlock.ErrReleased, tg.name, tg.url)
			errorShape(t, "a second Release", ls.Release(ctx), dlock.ErrNotHeld, tg.name, tg.url)
			errorShape(t, "Refresh after Release", ls.Refresh(ctx), dlock.ErrNotHeld, tg.name, tg.url)

			held, err := a.TryAcquire(ctx, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			cctx, ccancel := context.WithCancel(ctx)
			ccancel()
			if _, err := b.Acquire(cctx, name, nil); err != context.Canceled {
				t.Errorf("Acquire with a cancelled context: %v, want context.Canceled unwrapped", err)
			}
			dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			if _, err := b.Acquire(dctx, name, nil); err != context.DeadlineExceeded {
				t.Errorf("Acquire past its deadline: %v, want context.DeadlineExceeded unwrapped", err)
			}
			dcancel()

			a.Close()
			errorShape(t, "Err of a lease of a closed Locker", held.Err(), dlock.ErrClosed, tg.name, tg.url)
			_, err = a.TryAcquire(ctx, name, nil)
			errorShape(t, "TryAcquire on a closed Locker", err, dlock.ErrClosed, tg.name, tg.url)
		})
	}
}

func withParam(u, k, v string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + k + "=" + v
}

func strategyOf(u string) string {
	if _, q, ok := strings.Cut(u, "strategy="); ok {
		s, _, _ := strings.Cut(q, "&")
		return s
	}
	return "default"
}
