package testenv

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/stats"
)

// Interleaved is the timing loop of the drivers' uncontended benchmarks:
// each op warm times untimed (connections open, compilers warm), then b.N
// rounds that call every op once, in shuffled orders (stats.Interleave: the ops see
// the same noise), and each op's median.
func Interleaved(b *testing.B, warm int, ops ...func() error) []time.Duration {
	b.Helper()
	if err := stats.Warm(warm, ops...); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	times, err := stats.Interleave(b.N, ops...)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	return stats.Medians(times)
}
