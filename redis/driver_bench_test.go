package redis

import (
	"context"
	"crypto/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/floor"
	"github.com/dlock-go/dlock/internal/stats"
	"github.com/dlock-go/dlock/internal/testenv"
)

// The driver's own cost, without the portable layer: TryAcquire and
// Release of a free lock on a single server, called on the driver. Two
// workloads: one name reused ("same-name") and a name never used before
// on every acquire ("fresh-name"), as applications lock orders/42,
// orders/43, ...

// driverCycle returns one TryAcquire+Release of the driver on a single
// server, and its Close.
func driverCycle(b *testing.B) (cycle func(ctx context.Context, name string) error, srv *testenv.Server, closeFn func()) {
	return driverCycleOf(b, false)
}

// driverCycleOf is driverCycle, with the blocking Acquire (driver.Blocker)
// instead of TryAcquire when blocking is set.
func driverCycleOf(b *testing.B, blocking bool) (cycle func(ctx context.Context, name string) error, srv *testenv.Server, closeFn func()) {
	srv = testenv.Redis(b)
	cycle, closeFn = driverCycleAt(b, srv.URL, blocking)
	return cycle, srv, closeFn
}

// driverCycleAt is driverCycleOf on the server or Cluster of rawURL.
func driverCycleAt(b testing.TB, rawURL string, blocking bool) (cycle func(ctx context.Context, name string) error, closeFn func()) {
	d, err := openURL(context.Background(), rawURL)
	if err != nil {
		b.Fatal(err)
	}
	acquire := d.TryAcquire
	if blocking {
		acquire = d.(driver.Blocker).Acquire
	}
	cycle = func(ctx context.Context, name string) error {
		ls, err := acquire(ctx, driver.Request{Name: name, TTL: 30 * time.Second})
		if err != nil {
			return err
		}
		return ls.Release(ctx)
	}
	return cycle, func() { d.Close() }
}

// benchNames returns n lock names: the same one n times, or n fresh ones.
func benchNames(fresh bool, n int) []string {
	base := "bench/driver/" + rand.Text()
	names := make([]string, n)
	for i := range names {
		names[i] = base
		if fresh {
			names[i] = base + "/" + strconv.Itoa(i)
		}
	}
	return names
}

// BenchmarkDriver is one TryAcquire+Release of the driver per op: with
// -benchmem, the driver's allocations per acquire+release (target: at most
// 25, go-redis's included).
func BenchmarkDriver(b *testing.B) {
	for _, fresh := range []bool{false, true} {
		b.Run(map[bool]string{false: "same-name", true: "fresh-name"}[fresh], func(b *testing.B) {
			benchDriver(b, fresh, false)
		})
	}
}

// BenchmarkDriverBlocking is BenchmarkDriver with the blocking Acquire
// (driver.Blocker, what dlock.Locker.Acquire calls) on a free lock.
func BenchmarkDriverBlocking(b *testing.B) {
	for _, fresh := range []bool{false, true} {
		b.Run(map[bool]string{false: "same-name", true: "fresh-name"}[fresh], func(b *testing.B) {
			benchDriver(b, fresh, true)
		})
	}
}

// BenchmarkDriverCluster is BenchmarkDriverBlocking on a Redis Cluster
// (sharded pub/sub: a grant channel per slot, kept with the name's keys).
func BenchmarkDriverCluster(b *testing.B) {
	c := testenv.RedisCluster(b)
	for _, fresh := range []bool{false, true} {
		b.Run(map[bool]string{false: "same-name", true: "fresh-name"}[fresh], func(b *testing.B) {
			cycle, closeFn := driverCycleAt(b, c.URL, true)
			defer closeFn()
			runCycles(b, cycle, fresh)
		})
	}
}

// BenchmarkDriverRedlock is BenchmarkDriver on Redlock over 3 nodes: a
// TryAcquire and a Release each ask every node at once.
func BenchmarkDriverRedlock(b *testing.B) {
	tg := redlockTarget(b, 3)
	for _, fresh := range []bool{false, true} {
		b.Run(map[bool]string{false: "same-name", true: "fresh-name"}[fresh], func(b *testing.B) {
			cycle, closeFn := driverCycleAt(b, tg.url, false)
			defer closeFn()
			runCycles(b, cycle, fresh)
		})
	}
}

func benchDriver(b *testing.B, fresh, blocking bool) {
	cycle, _, closeFn := driverCycleOf(b, blocking)
	defer closeFn()
	runCycles(b, cycle, fresh)
}

// runCycles warms cycle up, then runs it b.N times, reporting allocations.
func runCycles(b *testing.B, cycle func(ctx context.Context, name string) error, fresh bool) {
	ctx := context.Background()
	warm := benchNames(fresh, 200)
	for _, n := range warm {
		if err := cycle(ctx, n); err != nil {
			b.Fatal(err)
		}
	}
	names := benchNames(fresh, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := cycle(ctx, names[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDriverVsFloor compares the driver with its fenced floor
// (internal/floor: one EVALSHA of SET NX PX + INCR, one EVALSHA
// compare-and-delete, on one connection) in turns: each round runs a turn
// of turnOps acquire+release cycles of one and then of the other (who goes
// first alternates), and its ratio is the driver's turn time over the
// floor's. Run it with -benchtime=20x for 20 rounds. Metrics: the median
// ratio and its spread (p25, p75, min, max over the rounds), and the
// median per-cycle times.
func BenchmarkDriverVsFloor(b *testing.B) {
	const turnOps = 200
	for _, fresh := range []bool{false, true} {
		b.Run(map[bool]string{false: "same-name", true: "fresh-name"}[fresh], func(b *testing.B) {
			ctx := context.Background()
			cycle, srv, closeFn := driverCycle(b)
			defer closeFn()
			f, err := floor.Open(ctx, srv.URL, "", nil)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			turn := func(do func(ctx context.Context, name string) error, names []string) time.Duration {
				t0 := time.Now()
				for _, n := range names {
					if err := do(ctx, n); err != nil {
						b.Fatal(err)
					}
				}
				return time.Since(t0) / time.Duration(len(names))
			}
			turn(f.Cycle, benchNames(fresh, turnOps)) // warm up
			turn(cycle, benchNames(fresh, turnOps))
			var ratios []float64
			var ours, theirs []time.Duration
			b.ResetTimer()
			for i := range b.N {
				dn, fn := benchNames(fresh, turnOps), benchNames(fresh, turnOps)
				var d, fl time.Duration
				if i%2 == 0 {
					d, fl = turn(cycle, dn), turn(f.Cycle, fn)
				} else {
					fl, d = turn(f.Cycle, fn), turn(cycle, dn)
				}
				ours, theirs = append(ours, d), append(theirs, fl)
				ratios = append(ratios, float64(d)/float64(fl))
			}
			b.StopTimer()
			slices.Sort(ratios)
			q := func(p float64) float64 { return ratios[int(p*float64(len(ratios)-1)+0.5)] }
			b.ReportMetric(q(0.5), "ratio-p50")
			b.ReportMetric(q(0.25), "ratio-p25")
			b.ReportMetric(q(0.75), "ratio-p75")
			b.ReportMetric(ratios[0], "ratio-min")
			b.ReportMetric(ratios[len(ratios)-1], "ratio-max")
			b.ReportMetric(stats.Micros(stats.Median(ours)), "driver-µs")
			b.ReportMetric(stats.Micros(stats.Median(theirs)), "floor-µs")
		})
	}
}
