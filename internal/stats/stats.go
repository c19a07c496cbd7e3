// Package stats holds the few statistics the benchmarks and the
// conformance suite share. It imports nothing but the standard library:
// the public conformance package depends on it.
package stats

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Median returns the middle of ds (the upper middle for an even count),
// 0 for none. ds is not changed.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// Sample times n calls of f, one after the other; it stops at f's first
// error.
func Sample(n int, f func() error) ([]time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := f(); err != nil {
			return ds, err
		}
		ds = append(ds, time.Since(t0))
	}
	return ds, nil
}

// Interleave times n rounds of ops, each round calling every op once, so
// that the ops see the same server and machine noise; it returns each
// op's times. Each round calls them in an order of its own, shuffled
// (from a fixed seed: runs repeat), so that no op is always the first of
// a round, or always the one right after another (say, after a write, or
// after the slowest). It stops at the first error.
func Interleave(n int, ops ...func() error) ([][]time.Duration, error) {
	times := make([][]time.Duration, len(ops))
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]int, len(ops))
	for j := range order {
		order[j] = j
	}
	for range n {
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, j := range order {
			op := ops[j]
			t0 := time.Now()
			if err := op(); err != nil {
				return times, err
			}
			times[j] = append(times[j], time.Since(t0))
		}
	}
	return times, nil
}

// Warm runs each op n times, untimed: connections open, caches and
// compilers warm, before Interleave times them.
func Warm(n int, ops ...func() error) error {
	for _, op := range ops {
		for range n {
			if err := op(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Medians is the Median of each op's times, as Interleave returns them.
func Medians(times [][]time.Duration) []time.Duration {
	out := make([]time.Duration, len(times))
	for i, ts := range times {
		out[i] = Median(ts)
	}
	return out
}

// MedianOf is the Median of Sample(n, f).
func MedianOf(n int, f func() error) (time.Duration, error) {
	ds, err := Sample(n, f)
	return Median(ds), err
}

// Micros is d in microseconds, with its fraction: the unit of the
// benchmarks' "-µs" metrics.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
