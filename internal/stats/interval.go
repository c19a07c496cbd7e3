package stats

import (
	"math"
	"slices"
)

// Interval is a figure measured once per round: the median of the
// rounds and a distribution-free confidence interval for that median
// (order statistics, the method benchstat uses), so it assumes nothing
// about the shape of the noise.
type Interval struct {
	Median float64 `json:"median"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
	// Rounds is how many values the interval is built from.
	Rounds int `json:"rounds"`
	// Confidence is the interval's actual coverage (at least the level
	// asked for when Rounds allows it; with few rounds it is lower and
	// says so).
	Confidence float64 `json:"confidence"`
}

// MedianCI returns the median of xs and the narrowest symmetric
// order-statistic interval [x(k), x(n+1-k)] whose coverage of the true
// median, 1 − 2·P(Binomial(n, ½) < k), is at least level; when even
// [min, max] covers less, it returns [min, max] with its coverage. It
// returns nil for no values. xs is not changed.
func MedianCI(xs []float64, level float64) *Interval {
	n := len(xs)
	if n == 0 {
		return nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	// cdf[k] = P(B < k+1) = P(B ≤ k) for B ~ Binomial(n, ½).
	k, cover := 1, 1-2*binomCDF(n, 0)
	for j := 2; j <= n/2; j++ {
		c := 1 - 2*binomCDF(n, j-1)
		if c < level {
			break
		}
		k, cover = j, c
	}
	return &Interval{Median: med, Lo: s[k-1], Hi: s[n-k], Rounds: n, Confidence: cover}
}

// binomCDF is P(B ≤ k) for B ~ Binomial(n, ½).
func binomCDF(n, k int) float64 {
	if k < 0 {
		return 0
	}
	sum := 0.0
	for i := 0; i <= k && i <= n; i++ {
		lg, _ := math.Lgamma(float64(n + 1))
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(lg - a - b - float64(n)*math.Ln2)
	}
	return sum
}

// HalfWidth is the interval's larger distance from the median, relative
// to it: 0.1 means the true value lies within ±10 %.
func (iv *Interval) HalfWidth() float64 {
	if iv == nil || iv.Median == 0 {
		return math.Inf(1)
	}
	return max(iv.Hi-iv.Median, iv.Median-iv.Lo) / math.Abs(iv.Median)
}

// Wide reports whether the interval is wider than ±frac of its median
// (or missing): a figure the report marks as unsettled.
func (iv *Interval) Wide(frac float64) bool { return iv.HalfWidth() > frac }

// Overlaps reports whether two intervals share a value: the figures
// cannot be told apart, and no winner is called between them.
func (iv *Interval) Overlaps(o *Interval) bool {
	if iv == nil || o == nil {
		return true
	}
	return iv.Lo <= o.Hi && o.Lo <= iv.Hi
}

// Contains reports whether v lies in the interval.
func (iv *Interval) Contains(v float64) bool { return iv != nil && iv.Lo <= v && v <= iv.Hi }
