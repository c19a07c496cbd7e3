package floor

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/stats"
)

// Uncontended is the drivers' uncontended benchmark: one Acquire+Release
// of a free lock on l against one Cycle of the floor f, the two
// alternating in one loop so that both see the same machine load. It
// reports both medians (floor-p50-µs, dlock-p50-µs) and their ratio
// (target: ratio <= 1.3).
func Uncontended(b *testing.B, l *dlock.Locker, f *Lock) {
	ctx := context.Background()
	name := "bench/uncontended/" + rand.Text()
	ours := func() error {
		ls, err := l.Acquire(ctx, name, nil)
		if err != nil {
			return err
		}
		return ls.Release(ctx)
	}
	for range 200 { // warm up: connections, scripts, prepared statements, the rows
		if err := f.Cycle(ctx, name); err != nil {
			b.Fatal("floor:", err)
		}
		if err := ours(); err != nil {
			b.Fatal(err)
		}
	}
	floor := make([]time.Duration, 0, b.N)
	dl := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := f.Cycle(ctx, name); err != nil {
			b.Fatal("floor:", err)
		}
		t1 := time.Now()
		if err := ours(); err != nil {
			b.Fatal(err)
		}
		floor = append(floor, t1.Sub(t0))
		dl = append(dl, time.Since(t1))
	}
	b.StopTimer()
	mf, mo := stats.Median(floor), stats.Median(dl)
	b.ReportMetric(stats.Micros(mf), "floor-p50-µs")
	b.ReportMetric(stats.Micros(mo), "dlock-p50-µs")
	b.ReportMetric(float64(mo)/float64(mf), "ratio")
}
