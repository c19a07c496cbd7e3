package dlock_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// The portable layer's cost as work grows (issue 15, item 4). Run with
// -benchmem; allocs/op is exact and must not depend on the number of names.

// BenchmarkManyNames acquires and releases names in turn from 32
// goroutines of one Locker on mem://, each goroutine cycling through names
// of its own (so that the figure is the cost per name, not contention): 10
// names each, then 10 000 each. The per-op cost must not grow with the
// number of names (the gate's entries, the keeper's heap and the driver's
// state are per name in use, never swept).
func BenchmarkManyNames(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			ctx := context.Background()
			l, err := dlock.Open(ctx, "mem://")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			const goroutines = 32
			names := make([][]string, goroutines)
			for g := range names {
				names[g] = make([]string, n)
				for i := range names[g] {
					names[g][i] = "scale/" + strconv.Itoa(g) + "/" + strconv.Itoa(i)
				}
			}
			var next atomic.Int32
			b.SetParallelism((goroutines + 1) / 2) // × GOMAXPROCS (2 here)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				mine := names[int(next.Add(1)-1)%goroutines]
				i := 0
				for pb.Next() {
					ls, err := l.Acquire(ctx, mine[i], nil)
					if err != nil {
						b.Error(err)
						return
					}
					if err := ls.Release(ctx); err != nil {
						b.Error(err)
						return
					}
					if i++; i == len(mine) {
						i = 0
					}
				}
			})
		})
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkKeepAlive1000Leases holds 1 000 leases of one Locker with the
// default TTL (keep-alive every TTL/3) for one keep-alive period and
// reports the process CPU time it took, minus the same period idle with
// the Locker open, as a percentage of one core ("%core"; target ≤ 1).
// Run with -benchtime=1x: one measurement takes two keep-alive periods
// (2 × 10s). DLOCK_BENCH_KEEPALIVE_PERIOD shortens the window (the leases
// are then refreshed less often than once in it).
func BenchmarkKeepAlive1000Leases(b *testing.B) {
	period := dlock.DefaultTTL / 3
	if v := testenvPeriod(); v > 0 {
		period = v
	}
	backends := []struct {
		name string
		url  func(b *testing.B) string
	}{
		{"mem", func(*testing.B) string { return "mem://" }},
		{"redis", func(b *testing.B) string { return testenv.NewRedis(b, nil).URL }},
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			ctx := context.Background()
			l, err := dlock.Open(ctx, be.url(b))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			for range b.N {
				// Idle: the Locker open, nothing held.
				c0 := cpuTime(b)
				time.Sleep(period)
				idle := cpuTime(b) - c0

				leases := make([]*dlock.Lease, 1000)
				for i := range leases {
					if leases[i], err = l.TryAcquire(ctx, "keepalive/"+strconv.Itoa(i), nil); err != nil {
						b.Fatal(err)
					}
				}
				// Holding: the window starts after the acquisitions and
				// spans one keep-alive period, so every lease is refreshed
				// once in it.
				c1 := cpuTime(b)
				time.Sleep(period + period/10)
				held := cpuTime(b) - c1
				for _, ls := range leases {
					if err := ls.Err(); err != nil {
						b.Fatalf("a lease ended while held: %v", err)
					}
					_ = ls.Release(ctx)
				}
				pct := 100 * float64(held-idle*11/10) / float64(period+period/10)
				b.ReportMetric(pct, "%core")
				b.ReportMetric(float64(held)/float64(time.Millisecond), "held-cpu-ms")
				b.ReportMetric(float64(idle)/float64(time.Millisecond), "idle-cpu-ms")
			}
		})
	}
}

// testenvPeriod reads DLOCK_BENCH_KEEPALIVE_PERIOD (a duration), 0 if unset.
func testenvPeriod() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("DLOCK_BENCH_KEEPALIVE_PERIOD"))
	return d
}
