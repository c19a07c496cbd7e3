package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/netproxy"
	"github.com/dlock-go/dlock/internal/obstest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// A statement ends when its context does, even when the server does not
// answer (a silent partition): the wait of a blocked Acquire (version:
// its polls), and a holder's Release. The driver's connections are
// aborted by the context itself, not by go-sql-driver's watcher
// (abort.go); a Locker goes on working once the network heals.
func TestStatementsEndWithTheirContextOnASilentServer(t *testing.T) {
	srv := testenv.MySQL(t)
	ctx := testenv.Context(t, 2*time.Minute)
	proxy := netproxy.ForTest(t, srv.Addr)
	for _, strategy := range []string{"forupdate", "getlock", "version"} {
		t.Run(strategy, func(t *testing.T) {
			direct, err := dlock.Open(ctx, testenv.WithParams(srv.URL, "strategy", strategy))
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			rec := &obstest.Recorder{}
			proxied, err := dlock.OpenWith(ctx, testenv.WithParams(strings.Replace(srv.URL, srv.Addr, proxy.Addr(), 1), "strategy", strategy), &dlock.Options{Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			defer proxied.Close()
			name := "abort-" + strategy
			// A version lease whose release the partition stopped stays
			// until its TTL.
			opts := &dlock.AcquireOptions{TTL: 30 * time.Second}
			if strategy == "version" {
				opts.TTL = 2 * time.Second
			}

			// ends checks that call returns by its 300ms context, with
			// the context's error, while the proxy is cut.
			ends := func(what string, call func(ctx context.Context) error) {
				t.Helper()
				heal := proxy.Cut(netproxy.Silent)
				defer heal()
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				start := time.Now()
				done := make(chan error, 1)
				go func() { done <- call(cctx) }()
				select {
				case err := <-done:
					if el := time.Since(start); el > 3*time.Second {
						t.Errorf("%s returned %v after its 300ms context ended", what, el-300*time.Millisecond)
					}
					if err == nil {
						t.Errorf("%s succeeded across a silent partition", what)
					} else if !errors.Is(err, context.DeadlineExceeded) {
						t.Logf("%s: %v", what, err)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("%s was still blocked 20s after its 300ms context ended", what)
				}
			}

			// A waiter, blocked in the server behind the direct holder.
			held, err := direct.Acquire(ctx, name, opts)
			if err != nil {
				t.Fatal(err)
			}
			waiting := make(chan error, 1)
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			defer wcancel()
			go func() {
				ls, err := proxied.Acquire(wctx, name, opts)
				if err == nil {
					ls.Release(ctx)
				}
				waiting <- err
			}()
			time.Sleep(300 * time.Millisecond) // the wait is in the server
			heal := proxy.Cut(netproxy.Silent)
			select {
			case err := <-waiting:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("the blocked Acquire ended with %v; want its context's deadline", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the blocked Acquire was still waiting 18s after its context ended")
			}
			heal()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// A holder's Release across the partition.
			var ls *dlock.Lease
			for ls == nil {
				if ls, err = proxied.TryAcquire(ctx, name, opts); err != nil && !errors.Is(err, dlock.ErrNotAcquired) {
					t.Fatal(err)
				}
				if ls == nil {
					time.Sleep(50 * time.Millisecond) // the killed wait's session is still going
				}
			}
			ends("Release", ls.Release)

			// Healed: the Locker works again, on new connections.
			deadline := time.Now().Add(30 * time.Second) // the lease's TTL, if the release did not reach the server
			for {
				ls, err := proxied.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: time.Second})
				if err == nil {
					if err := ls.Release(ctx); err != nil {
						t.Fatal(err)
					}
					break
				}
				if !errors.Is(err, dlock.ErrNotAcquired) || time.Now().After(deadline) {
					t.Fatalf("after the partition healed: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// A context's abort is the caller's own doing, which its
			// call reports: go-sql-driver's log line for it is dropped.
			if text := rec.Text(); strings.Contains(text, "aborted") || strings.Contains(text, "i/o timeout") {
				t.Errorf("the Observer got a client log line for a context's abort:\n%s", text)
			}
		})
	}
}
