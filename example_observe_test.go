package dlock_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/dlock-go/dlock"
)

// A Locker that logs every step of its leases with log/slog. (The time
// and the durations are left out here so that the output is the same on
// every run.)
func ExampleNewSlogObserver() {
	ctx := context.Background()
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug, // Warn in production: losses and failures only
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "elapsed", "id":
				return slog.Attr{}
			}
			return a
		},
	})
	l, err := dlock.OpenWith(ctx, "mem://", &dlock.Options{Observer: dlock.NewSlogObserver(slog.New(h))})
	if err != nil {
		panic(err)
	}
	lease, err := l.Acquire(ctx, "orders/42", nil)
	if err != nil {
		panic(err)
	}
	lease.Release(ctx)
	l.Close()
	// Output:
	// level=DEBUG msg="dlock: attempt" backend=memory strategy=in-process name=orders/42 wait=true
	// level=DEBUG msg="dlock: granted" backend=memory strategy=in-process name=orders/42 wait=true token=1
	// level=DEBUG msg="dlock: released" backend=memory strategy=in-process name=orders/42 token=1 outcome=ok
	// level=INFO msg="dlock: closed" backend=memory strategy=in-process outcome=ok
}
