package stats

import (
	"errors"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{3}, 3},
		{[]time.Duration{5, 1, 3}, 3},
		{[]time.Duration{4, 1, 3, 2}, 3}, // the upper middle
	} {
		in := append([]time.Duration(nil), c.in...)
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v; want %v", in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Fatalf("Median changed its argument: %v, was %v", c.in, in)
			}
		}
	}
}

func TestSampleStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	ds, err := Sample(5, func() error {
		calls++
		if calls == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || len(ds) != 2 || calls != 3 {
		t.Fatalf("Sample = %d durations, %v after %d calls; want 2, boom, 3", len(ds), err, calls)
	}
	ds, err = Sample(4, func() error { time.Sleep(time.Millisecond); return nil })
	if err != nil || len(ds) != 4 {
		t.Fatalf("Sample = %d durations, %v; want 4, nil", len(ds), err)
	}
	for _, d := range ds {
		if d < time.Millisecond {
			t.Fatalf("a call of 1ms was timed %v", d)
		}
	}
}

func TestMicros(t *testing.T) {
	if got := Micros(1500 * time.Nanosecond); got != 1.5 {
		t.Fatalf("Micros(1.5µs) = %v", got)
	}
}

func TestWarmAndMedians(t *testing.T) {
	calls := [2]int{}
	ops := []func() error{func() error { calls[0]++; return nil }, func() error { calls[1]++; return nil }}
	if err := Warm(3, ops...); err != nil || calls != [2]int{3, 3} {
		t.Errorf("Warm(3): err %v, calls %v; want each op called 3 times", err, calls)
	}
	boom := errors.New("boom")
	if err := Warm(3, func() error { return boom }); err != boom {
		t.Errorf("Warm with a failing op: %v, want its error", err)
	}
	got := Medians([][]time.Duration{{3, 1, 2}, {5}})
	if len(got) != 2 || got[0] != 2 || got[1] != 5 {
		t.Errorf("Medians = %v, want [2 5]", got)
	}
}

// TestInterleaveShuffles: each of 300 rounds calls every op once, and
// every op is the first of some rounds and right after every other op in
// some; the times come back by op, one per round. With a fixed order, op 0
// would always be first and op 1 always after op 0.
func TestInterleaveShuffles(t *testing.T) {
	const n, rounds = 3, 300
	var order []int
	ops := make([]func() error, n)
	for i := range ops {
		ops[i] = func() error { order = append(order, i); return nil }
	}
	times, err := Interleave(rounds, ops...)
	if err != nil {
		t.Fatal(err)
	}
	first := map[int]int{}
	after := map[[2]int]int{}
	for r := range rounds {
		round := order[r*n : (r+1)*n]
		seen := map[int]bool{}
		for k, j := range round {
			seen[j] = true
			if k > 0 {
				after[[2]int{round[k-1], j}]++
			}
		}
		if len(seen) != n {
			t.Fatalf("round %d called %v", r, round)
		}
		first[round[0]]++
	}
	for i := range n {
		if first[i] == 0 || len(times[i]) != rounds {
			t.Fatalf("op %d first in %d rounds, timed %d times", i, first[i], len(times[i]))
		}
	}
	if len(after) != n*(n-1) {
		t.Fatalf("the pairs (before, after) are %v, want all %d", after, n*(n-1))
	}
}
