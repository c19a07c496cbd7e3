package batch

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// sink records the batches a Batcher sends.
type sink struct {
	mu      sync.Mutex
	batches [][]int
	sent    chan struct{}
}

func newSink() *sink { return &sink{sent: make(chan struct{}, 100)} }

func (s *sink) send(items []int) {
	s.mu.Lock()
	s.batches = append(s.batches, slices.Clone(items))
	s.mu.Unlock()
	s.sent <- struct{}{}
}

func (s *sink) got() [][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

func TestWindowGathers(t *testing.T) {
	s := newSink()
	b := &Batcher[int]{Max: 100, Send: s.send}
	for i := range 5 {
		b.Add(i, 50*time.Millisecond)
	}
	if got := s.got(); len(got) != 0 {
		t.Fatalf("sent %v before the window ended", got)
	}
	<-s.sent
	if got := s.got(); len(got) != 1 || !slices.Equal(got[0], []int{0, 1, 2, 3, 4}) {
		t.Fatalf("batches %v, want one of the 5 items in order", got)
	}
	// The timer is re-armed by the next batch's first item.
	b.Add(9, time.Millisecond)
	<-s.sent
	if got := s.got(); len(got) != 2 || !slices.Equal(got[1], []int{9}) {
		t.Fatalf("batches %v, want a second batch [9]", got)
	}
}

func TestFullBatchSentAtOnce(t *testing.T) {
	s := newSink()
	b := &Batcher[int]{Max: 3, Send: s.send}
	for i := range 7 {
		b.Add(i, time.Hour)
	}
	if got := s.got(); len(got) != 2 || !slices.Equal(got[0], []int{0, 1, 2}) || !slices.Equal(got[1], []int{3, 4, 5}) {
		t.Fatalf("batches %v, want [0 1 2] and [3 4 5] sent by the items that filled them", got)
	}
	b.Flush()
	if got := s.got(); len(got) != 3 || !slices.Equal(got[2], []int{6}) {
		t.Fatalf("batches %v, want Flush to send [6]", got)
	}
	b.Flush() // nothing waits: no empty batch
	if got := s.got(); len(got) != 3 {
		t.Fatalf("an empty Flush sent a batch: %v", got)
	}
}

func TestConcurrentAddsLoseNothing(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	b := &Batcher[int]{Max: 7, Send: func(items []int) {
		mu.Lock()
		for _, it := range items {
			seen[it]++
		}
		mu.Unlock()
	}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				b.Add(g*1000+i, 100*time.Microsecond)
			}
		})
	}
	wg.Wait()
	b.Flush()
	time.Sleep(10 * time.Millisecond) // a timer that fired during Flush
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1600 {
		t.Fatalf("%d distinct items sent, want 1600", len(seen))
	}
	for it, n := range seen {
		if n != 1 {
			t.Fatalf("item %d sent %d times", it, n)
		}
	}
}
