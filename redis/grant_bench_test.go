package redis

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/childproc"
	"github.com/dlock-go/dlock/internal/stats"
	"github.com/dlock-go/dlock/internal/testenv"
)

// BenchmarkGrantCost measures what a contended grant costs the server: w
// goroutines acquire one name and release it at once, in a loop, on w
// Lockers ("lockers") or all on one ("one-locker"), on a server of the
// benchmark's own. Metrics, from INFO commandstats before and after:
// scripts/grant (EVALSHA and EVAL calls per grant, i.e. requests that run
// a script), cmds/grant (every command the server ran, the scripts' own
// redis.call included, INFO excluded), and grants/s. Target: at most 3
// server requests per grant with 64 waiters on one Locker.
func BenchmarkGrantCost(b *testing.B) {
	for _, w := range []int{8, 64} {
		for _, one := range []bool{false, true} {
			b.Run(fmt.Sprintf("waiters=%d/%s", w, map[bool]string{false: "lockers", true: "one-locker"}[one]), func(b *testing.B) {
				benchGrantCost(b, w, one)
			})
		}
	}
}

func benchGrantCost(b *testing.B, waiters int, oneLocker bool) {
	ctx := context.Background()
	srv := testenv.NewRedis(b, nil)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer raw.Close()
	ls := make([]*dlock.Locker, waiters)
	for i := range ls {
		if oneLocker && i > 0 {
			ls[i] = ls[0]
			continue
		}
		l, err := dlock.Open(ctx, srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		ls[i] = l
	}
	name := "bench/grant/" + rand.Text()
	// Warm: every Locker has waited once (its subscriptions are made).
	var wg sync.WaitGroup
	var grants atomic.Int64
	run := func(n int64) {
		grants.Store(0)
		for _, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for grants.Add(1) <= n {
					lease, err := l.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 30 * time.Second})
					if err != nil {
						b.Error(err)
						return
					}
					if err := lease.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	run(int64(4 * waiters))
	before := commandStats(b, ctx, raw)
	b.ResetTimer()
	t0 := time.Now()
	run(int64(b.N))
	elapsed := time.Since(t0)
	b.StopTimer()
	after := commandStats(b, ctx, raw)
	var scripts, all int64
	for cmd, n := range after {
		d := n - before[cmd]
		if cmd == "info" {
			continue
		}
		all += d
		if cmd == "evalsha" || cmd == "eval" {
			scripts += d
		}
	}
	b.ReportMetric(float64(scripts)/float64(b.N), "scripts/grant")
	b.ReportMetric(float64(all)/float64(b.N), "cmds/grant")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "grants/s")
}

// commandStats returns the calls of every command from INFO commandstats.
func commandStats(tb testing.TB, ctx context.Context, c *goredis.Client) map[string]int64 {
	tb.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	calls, err := testenv.RedisCommandCalls(info)
	if err != nil {
		tb.Fatal(err)
	}
	return calls
}

// BenchmarkHandoffLatency measures the time from the start of a holder's
// Release to the return of the Acquire of a waiter (another Locker) that
// waited for it 2ms: one op is one hand-off. Metric: the median, in µs.
// The waiter is a goroutine of this process (waiter=goroutine, as
// dlockbench's clients are unless -procs) or a process of its own
// (waiter=process, as lock users are), so that one can tell whether
// clients sharing one process, and one Go scheduler, flatter or slow down
// a hand-off whose grant message and release reply arrive together (on a
// 2-vCPU VM: neither; the process of its own was 3-7 % slower). The two
// times are read on one clock (CLOCK_REALTIME, through time.Now, in both
// processes).
func BenchmarkHandoffLatency(b *testing.B) {
	b.Run("waiter=goroutine", func(b *testing.B) {
		benchHandoffLatency(b, func(b *testing.B, url, name string) (wait func() <-chan time.Time, stop func()) {
			waiter, err := dlock.Open(context.Background(), url)
			if err != nil {
				b.Fatal(err)
			}
			got := make(chan time.Time, 1)
			return func() <-chan time.Time {
				go func() {
					ls, err := waiter.Acquire(context.Background(), name, handoffOpts)
					t := time.Now()
					if err != nil {
						b.Error(err)
					} else {
						_ = ls.Release(context.Background())
					}
					got <- t
				}()
				return got
			}, func() { waiter.Close() }
		})
	})
	b.Run("waiter=process", func(b *testing.B) {
		benchHandoffLatency(b, func(b *testing.B, url, name string) (wait func() <-chan time.Time, stop func()) {
			c, err := childproc.Start(childproc.Spec{Name: "waiter", RoleEnv: childEnv, Role: roleHandoffWaiter,
				Args: []string{"-test.run=^$"}, Env: []string{handoffURLEnv + "=" + url, handoffNameEnv + "=" + name}, DieWithParent: true})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Expect("ready", time.Minute); err != nil {
				c.Close()
				b.Fatal(err)
			}
			got := make(chan time.Time, 1)
			return func() <-chan time.Time {
				if err := c.Send("acquire"); err != nil {
					b.Fatal(err)
				}
				go func() {
					line, err := c.Expect("got", time.Minute)
					ns, perr := strconv.ParseInt(line, 10, 64)
					if err != nil || perr != nil {
						b.Error(err, perr)
					}
					got <- time.Unix(0, ns)
				}()
				return got
			}, c.Close
		})
	})
}

// handoffOpts are BenchmarkHandoffLatency's acquire options.
var handoffOpts = &dlock.AcquireOptions{TTL: 30 * time.Second}

// benchHandoffLatency runs BenchmarkHandoffLatency with the waiter that
// start starts: wait starts its Acquire of name and sends when it
// returned.
func benchHandoffLatency(b *testing.B, start func(b *testing.B, url, name string) (wait func() <-chan time.Time, stop func())) {
	ctx := context.Background()
	srv := testenv.Redis(b)
	holder, err := dlock.Open(ctx, srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer holder.Close()
	name := "bench/handoff-latency/" + rand.Text()
	wait, stop := start(b, srv.URL, name)
	defer stop()
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N + 20 {
		held, err := holder.Acquire(ctx, name, handoffOpts)
		if err != nil {
			b.Fatal(err)
		}
		got := wait()
		time.Sleep(2 * time.Millisecond)
		t0 := time.Now()
		if err := held.Release(ctx); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, (<-got).Sub(t0))
	}
	ds = ds[20:] // the first waits make the subscriptions
	b.StopTimer()
	b.ReportMetric(stats.Micros(stats.Median(ds)), "handoff-µs")
}

// The child process of BenchmarkHandoffLatency's waiter=process: it opens
// a Locker on the URL handoffURLEnv names, says "ready", and then, for
// each "acquire" line, takes the name handoffNameEnv names, says "got"
// and the wall-clock time its Acquire returned (nanoseconds since the
// epoch), and releases it.
const (
	childEnv          = "DLOCK_REDIS_TEST_CHILD"
	roleHandoffWaiter = "handoff-waiter"
	handoffURLEnv     = "DLOCK_REDIS_TEST_HANDOFF_URL"
	handoffNameEnv    = "DLOCK_REDIS_TEST_HANDOFF_NAME"
)

func serveChild(role string, p *childproc.Parent) int {
	if role != roleHandoffWaiter {
		fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
		return 2
	}
	ctx := context.Background()
	l, err := dlock.Open(ctx, os.Getenv(handoffURLEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer l.Close()
	name := os.Getenv(handoffNameEnv)
	if err := p.Send("ready"); err != nil {
		return 1
	}
	for {
		line, err := p.Recv()
		if err != nil {
			return 0 // the parent closed the channel
		}
		if line != "acquire" {
			fmt.Fprintf(os.Stderr, "unknown line %q\n", line)
			return 2
		}
		ls, err := l.Acquire(ctx, name, handoffOpts)
		t := time.Now()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := ls.Release(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := p.Send("got " + strconv.FormatInt(t.UnixNano(), 10)); err != nil {
			return 1
		}
	}
}
