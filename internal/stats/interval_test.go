package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestMedianCI(t *testing.T) {
	if MedianCI(nil, 0.95) != nil {
		t.Fatal("no values: want nil")
	}
	iv := MedianCI([]float64{5, 1, 4, 2, 3}, 0.95)
	// n=5: [min, max] covers 1−2/32 = 93.75 %, the best there is.
	if iv.Median != 3 || iv.Lo != 1 || iv.Hi != 5 || math.Abs(iv.Confidence-0.9375) > 1e-9 {
		t.Errorf("n=5: %+v", iv)
	}
	xs := make([]float64, 20)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	iv = MedianCI(xs, 0.95)
	// n=20: [x(6), x(15)] covers 95.9 %; [x(7), x(14)] only 88.5 %.
	if iv.Median != 10.5 || iv.Lo != 6 || iv.Hi != 15 || iv.Confidence < 0.95 {
		t.Errorf("n=20: %+v", iv)
	}
	if iv.Wide(0.5) || !iv.Wide(0.1) {
		t.Errorf("HalfWidth %v", iv.HalfWidth())
	}
}

// TestMedianCICoverage checks the promise itself: over many samples of
// a skewed distribution, the interval holds the true median at least as
// often as its stated confidence.
func TestMedianCICoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	trueMedian := math.Ln2 // of Exp(1)
	for _, n := range []int{5, 9, 15, 30} {
		hit, trials := 0, 4000
		var conf float64
		for range trials {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = rng.ExpFloat64()
			}
			iv := MedianCI(xs, 0.95)
			conf = iv.Confidence
			if iv.Contains(trueMedian) {
				hit++
			}
		}
		if got := float64(hit) / float64(trials); got < conf-0.02 {
			t.Errorf("n=%d: covered %.3f, stated %.3f", n, got, conf)
		}
	}
}

func TestOverlaps(t *testing.T) {
	a, b, c := &Interval{Lo: 1, Hi: 2}, &Interval{Lo: 2, Hi: 3}, &Interval{Lo: 2.5, Hi: 4}
	if !a.Overlaps(b) || a.Overlaps(c) || !b.Overlaps(c) || !a.Overlaps(nil) {
		t.Error("Overlaps")
	}
}
