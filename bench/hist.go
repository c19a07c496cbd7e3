package bench

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: 1 ns to 100 s at 3 significant digits.
const (
	histMin    = 1
	histMax    = int64(100 * time.Second)
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

func record(h *hdrhistogram.Histogram, v int64) {
	_ = h.RecordValue(min(max(v, histMin), histMax))
}

func encode(h *hdrhistogram.Histogram) (string, error) {
	b, err := h.EncodeV2()
	return string(b), err
}
