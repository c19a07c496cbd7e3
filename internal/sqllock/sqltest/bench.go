package sqltest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/floor"
	"github.com/dlock-go/dlock/internal/stats"
	"github.com/dlock-go/dlock/internal/testenv"
)

// Contended runs 8 workers on one name, each holding the lock for 1ms and
// waiting 2ms between holds, and reports the grants per second and their
// ratio to the ideal 1/(hold + one round trip), rtt being the median of a
// trivial query (targets: ratio >= 0.9 for a server queue, 0.8 for
// notify-and-retry). A hold sleeps in the kernel (testenv.Hold), which
// the other workers' replies do not stretch; on a loaded machine it still
// wakes late: "ratio" uses the mean hold as slept, "ratio-nominal" 1ms.
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
	var held time.Duration // the holds as slept: a 1ms hold may take longer on a loaded machine
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
				testenv.Hold(hold)
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
	b.ReportMetric(stats.Micros(rtt), "rtt-µs")
	b.ReportMetric(stats.Micros(avgHold), "hold-µs")
	// The hand-off: the time per grant beyond the hold itself.
	b.ReportMetric(stats.Micros(el/time.Duration(grants)-avgHold), "handoff-µs")
	// ratio to 1/(hold + rtt) with the nominal hold, and with the hold
	// as it was actually slept.
	b.ReportMetric(rate*(hold+rtt).Seconds(), "ratio-nominal")
	b.ReportMetric(rate*(avgHold+rtt).Seconds(), "ratio")
}

// BenchUncontended runs floor.Uncontended for each strategy: a Locker
// opened from rawURL with that strategy against the floor of the same
// name on the same server.
func BenchUncontended(b *testing.B, rawURL string, strategies []string) {
	for _, s := range strategies {
		b.Run(s, func(b *testing.B) {
			ctx := context.Background()
			f, err := floor.Open(ctx, rawURL, s, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			floor.Uncontended(b, Open(b, ctx, WithParams(rawURL, "strategy", s)), f)
		})
	}
}

// BenchContended runs Contended for each strategy, rtt being the median
// of 1000 raw round trips (floor.OpenRTT) to the server of rawURL.
func BenchContended(b *testing.B, rawURL string, strategies []string) {
	ctx := context.Background()
	r, err := floor.OpenRTT(ctx, rawURL)
	if err != nil {
		b.Fatal(err)
	}
	rtt, err := r.Median(ctx, 1000)
	r.Close()
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range strategies {
		b.Run(s, func(b *testing.B) {
			Contended(b, func() *dlock.Locker {
				return Open(b, ctx, WithParams(rawURL, "strategy", s))
			}, rtt)
		})
	}
}
