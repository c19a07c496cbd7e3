package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// cancelSlack is how long after its ctx ends a cancelled call may take to
// return, on a server that does not answer at all.
const cancelSlack = 100 * time.Millisecond

// TestCancelledOnFrozenServer: with every server stopped (SIGSTOP), an
// Acquire of a held lock (its Watch subscribes), a TryAcquire of a free
// one and an Acquire of a free one each return within cancelSlack of their
// 200ms ctx. Their clean-up goes on in the background and is not lost:
// once the servers resume, Close waits for it, and then no lock key, no
// waiter queue and no subscription of the cancelled calls is left, even
// though the servers ran the buffered acquires after the calls gave up.
func TestCancelledOnFrozenServer(t *testing.T) {
	for _, n := range []int{1, 3} {
		nodes := testenv.NewRedisNodes(t, n, nil)
		tg := redlockOn(t, nodes)
		if n == 1 {
			tg = &target{name: "single", url: nodes[0].URL, addrs: tg.addrs, raw: tg.raw}
		}
		t.Run(tg.name, func(t *testing.T) {
			ctx := testCtx(t)
			holder := open(t, ctx, tg.url)
			b, err := dlock.Open(ctx, tg.url)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			base := uniqueName(t)
			held, err := holder.TryAcquire(ctx, base+"/held", &dlock.AcquireOptions{TTL: 30 * time.Second}) // no Watch: no subscription of its own
			if err != nil {
				t.Fatal(err)
			}
			// Warm b up: its connections and first-use checks are done.
			if ls, err := b.TryAcquire(ctx, base+"/warm", nil); err != nil {
				t.Fatal(err)
			} else if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}

			for _, s := range nodes {
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
			}
			paused := true
			resume := func() {
				if paused {
					paused = false
					for _, s := range nodes {
						if err := s.Resume(); err != nil {
							t.Error(err)
						}
					}
				}
			}
			defer resume()
			calls := []struct {
				what, name string
				f          func(ctx context.Context, name string) error
			}{
				{"Acquire of a held lock", base + "/held", func(ctx context.Context, name string) error {
					_, err := b.Acquire(ctx, name, nil)
					return err
				}},
				{"TryAcquire of a free lock", base + "/try", func(ctx context.Context, name string) error {
					_, err := b.TryAcquire(ctx, name, nil)
					return err
				}},
				{"Acquire of a free lock", base + "/free", func(ctx context.Context, name string) error {
					_, err := b.Acquire(ctx, name, nil)
					return err
				}},
			}
			for _, c := range calls {
				const deadline = 200 * time.Millisecond
				cctx, cancel := context.WithTimeout(ctx, deadline)
				start := time.Now()
				err := c.f(cctx, c.name)
				el := time.Since(start)
				cancel()
				if err == nil {
					t.Fatalf("%s on a stopped server succeeded", c.what)
				}
				if el > deadline+cancelSlack {
					t.Errorf("%s returned %v after it started, %v after its %v ctx ended (bound %v): %v",
						c.what, el, el-deadline, deadline, cancelSlack, err)
				}
				if strings.HasPrefix(c.what, "Acquire") && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %v, want context.DeadlineExceeded", c.what, err)
				}
			}
			resume()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			// Close waited for the clean-up: nothing of the calls is left.
			for _, c := range calls {
				k := keysFor(DefaultPrefix, c.name)
				for i, r := range tg.raw {
					if v, err := r.Get(ctx, k.lock).Result(); err == nil {
						t.Errorf("node %d: after Close, %s left its lock key %s = %q", i, c.what, k.lock, v)
					}
				}
			}
			for deadline := time.Now().Add(regLifetime + 2*time.Second); ; time.Sleep(50 * time.Millisecond) {
				var left []string
				for i, r := range tg.raw {
					ks, err := r.Keys(ctx, DefaultPrefix+"*:[qw]*").Result()
					if err != nil {
						t.Fatal(err)
					}
					chs, err := r.PubSubChannels(ctx, DefaultPrefix+"*").Result()
					if err != nil {
						t.Fatal(err)
					}
					for _, x := range append(ks, chs...) {
						left = append(left, "node "+string(rune('0'+i))+": "+x)
					}
				}
				if len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after Close, waiter queues or subscriptions left: %q", left)
				}
			}
		})
	}
}
