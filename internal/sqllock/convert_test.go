package sqllock

import (
	"math"
	"testing"
	"time"
)

func convSeeds(f *testing.F) {
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second, math.MaxInt64 - 1, math.MinInt64, -1, 0, 1,
		time.Microsecond - 1, time.Microsecond, time.Millisecond + 1, time.Second - 1, time.Second, time.Second + 1, math.MaxInt32 * time.Millisecond} {
		f.Add(int64(d))
	}
}

// FuzzCeilUnits: a duration converted to a server's unit is never shorter
// than the duration (it rounds up), never wraps, and stays within the
// bounds asked for.
func FuzzCeilUnits(f *testing.F) {
	convSeeds(f)
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		for _, c := range []struct {
			unit   time.Duration
			lo, hi int64
			conv   func(time.Duration) int64
		}{
			{time.Second, 1, 31536000, func(d time.Duration) int64 { return CeilSeconds(d, 1, 31536000) }},
			{time.Millisecond, 1, math.MaxInt32, func(d time.Duration) int64 { return CeilMillis(d, 1, math.MaxInt32) }},
			{time.Microsecond, 1, math.MaxInt64, Micros},
		} {
			v := c.conv(d)
			if v < c.lo || v > c.hi {
				t.Fatalf("%v in units of %v: %d, outside [%d, %d]", d, c.unit, v, c.lo, c.hi)
			}
			// Never shorter than d, unless capped at hi.
			if v < c.hi && d > 0 {
				if back := time.Duration(v); back < time.Duration(math.MaxInt64/c.unit) && back*c.unit < d {
					t.Fatalf("%v in units of %v: %d, shorter", d, c.unit, v)
				}
				if v > 1 && time.Duration(v-1)*c.unit >= d {
					t.Fatalf("%v in units of %v: %d, more than one unit over", d, c.unit, v)
				}
			}
		}
		r := FromMicros(n)
		if r < 0 || n > 0 && r < time.Duration(min(n, int64(math.MaxInt64/time.Microsecond)))*time.Microsecond {
			t.Fatalf("FromMicros(%d) = %v", n, r)
		}
	})
}
