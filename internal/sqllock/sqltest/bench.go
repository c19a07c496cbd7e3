package sqltest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// Uncontended measures one Acquire+Release of a free lock on l against
// floor, a hand-written lock and unlock on one connection, alternating
// the two in one loop so that both see the same load. It reports both
// medians and their ratio (target: ratio <= 1.3).
func Uncontended(b *testing.B, l *dlock.Locker, floor func(ctx context.Context) error) {
	ctx := context.Background()
	name := fmt.Sprintf("bench/uncontended/%d", time.Now().UnixNano())
	for range 200 { // warm up: connections, prepared statements, the row
		if err := floor(ctx); err != nil {
			b.Fatal(err)
		}
		ls, err := l.Acquire(ctx, name, nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = ls.Release(ctx)
	}
	floors := make([]time.Duration, 0, b.N)
	ours := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := floor(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		ls, err := l.Acquire(ctx, name, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			b.Fatal(err)
		}
		floors = append(floors, t1.Sub(t0))
		ours = append(ours, time.Since(t1))
	}
	b.StopTimer()
	mf, mo := median(floors), median(ours)
	b.ReportMetric(float64(mo.Microseconds()), "p50-µs")
	b.ReportMetric(float64(mf.Microseconds()), "floor-p50-µs")
	b.ReportMetric(float64(mo)/float64(mf), "ratio")
}

// Contended runs 8 workers on one name, each holding the lock for 1ms and
// waiting 2ms between holds, and reports the grants per second and their
// ratio to the ideal 1/(hold + one round trip), rtt being the median of a
// trivial query (targets: ratio >= 0.9 for a server queue, 0.8 for
// notify-and-retry). On a loaded machine time.Sleep(1ms) sleeps longer:
// "ratio" uses the mean hold as slept, "ratio-nominal" 1ms.
func Contended(b *testing.B, open func() *dlock.Locker, rtt time.Duration) {
	const workers, hold, between = 8, time.Millisecond, 2 * time.Millisecond
	ctx := context.Background()
	name := fmt.Sprintf("bench/contended/%d", time.Now().UnixNano())
	lockers := make([]*dlock.Locker, workers)
	for i := range lockers {
		lockers[i] = open()
		ls, err := lockers[i].Acquire(ctx, name, nil) // warm up
		if err != nil {
			b.Fatal(err)
		}
		_ = ls.Release(ctx)
	}
	total := max(b.N, 500)
	var mu sync.Mutex
	grants := 0
	var held time.Duration // the holds as slept: time.Sleep(1ms) may take longer on a loaded machine
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, l := range lockers {
		wg.Go(func() {
			for {
				mu.Lock()
				if grants >= total {
					mu.Unlock()
					return
				}
				mu.Unlock()
				ls, err := l.Acquire(ctx, name, nil)
				if err != nil {
					b.Error(err)
					return
				}
				t0 := time.Now()
				time.Sleep(hold)
				mu.Lock()
				grants++
				held += time.Since(t0)
				mu.Unlock()
				if err := ls.Release(ctx); err != nil {
					b.Error(err)
					return
				}
				time.Sleep(between)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	rate := float64(grants) / el.Seconds()
	avgHold := held / time.Duration(grants)
	b.ReportMetric(rate, "grants/s")
	b.ReportMetric(float64(rtt.Microseconds()), "rtt-µs")
	b.ReportMetric(float64(avgHold.Microseconds()), "hold-µs")
	// The hand-off: the time per grant beyond the hold itself.
	b.ReportMetric(float64((el/time.Duration(grants) - avgHold).Microseconds()), "handoff-µs")
	// ratio to 1/(hold + rtt) with the nominal hold, and with the hold
	// as it was actually slept.
	b.ReportMetric(rate*(hold+rtt).Seconds(), "ratio-nominal")
	b.ReportMetric(rate*(avgHold+rtt).Seconds(), "ratio")
}

// RTT returns the median of n calls of one round trip.
func RTT(b *testing.B, n int, roundTrip func(ctx context.Context) error) time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		t0 := time.Now()
		if err := roundTrip(context.Background()); err != nil {
			b.Fatal(err)
		}
		ds[i] = time.Since(t0)
	}
	return median(ds)
}

// BenchUncontended runs Uncontended for each strategy in floors, on
// Lockers opened from rawURL with that strategy.
func BenchUncontended(b *testing.B, rawURL string, strategies []string, floors map[string]func(ctx context.Context) error) {
	for _, s := range strategies {
		b.Run(s, func(b *testing.B) {
			Uncontended(b, Open(b, context.Background(), WithParams(rawURL, "strategy", s)), floors[s])
		})
	}
}

// BenchContended runs Contended for each strategy.
func BenchContended(b *testing.B, rawURL string, strategies []string, rtt time.Duration) {
	for _, s := range strategies {
		b.Run(s, func(b *testing.B) {
			Contended(b, func() *dlock.Locker {
				return Open(b, context.Background(), WithParams(rawURL, "strategy", s))
			}, rtt)
		})
	}
}
