package backendtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Contention is the load of a driver's own semaphore test: Goroutines
// goroutines on each of Sems (one semaphore of N permits per Locker)
// acquire a permit Rounds times each, hold it for Hold and release it.
type Contention struct {
	Sems       []*dlock.Semaphore
	N          int
	Goroutines int
	Rounds     int
	// Opts are each Acquire's options (nil: the defaults).
	Opts *dlock.AcquireOptions
	Hold time.Duration
	// Held, when set, runs while each permit is held (a check on the
	// server); an error it returns fails the test.
	Held func(ctx context.Context, p *dlock.Lease) error
}

// SemaphoreAtMostN runs k and fails t if more than N permits were held at
// once (counted between each grant and its release), a token was granted
// twice, a goroutine's token was not above its previous one, or an
// Acquire or Release failed (that goroutine stops). It returns the most
// holders seen at once and the number of distinct tokens granted, for
// the caller's own expectations (N reached, every grant counted).
func SemaphoreAtMostN(ctx context.Context, t testing.TB, k Contention) (most, tokens int) {
	t.Helper()
	var holders, peak atomic.Int64
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for _, sem := range k.Sems {
		for range k.Goroutines {
			wg.Go(func() {
				var last uint64
				for range k.Rounds {
					p, err := sem.Acquire(ctx, k.Opts)
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					h := holders.Add(1)
					if h > int64(k.N) {
						t.Errorf("%d holders of a semaphore of %d", h, k.N)
					}
					for m := peak.Load(); h > m && !peak.CompareAndSwap(m, h); m = peak.Load() {
					}
					if k.Held != nil {
						if err := k.Held(ctx, p); err != nil {
							t.Error(err)
						}
					}
					tok := p.Token()
					mu.Lock()
					dup := seen[tok]
					seen[tok] = true
					mu.Unlock()
					if dup {
						t.Errorf("token %d granted twice", tok)
					}
					if tok <= last {
						t.Errorf("token %d after %d", tok, last)
					}
					last = tok
					time.Sleep(k.Hold)
					holders.Add(-1)
					if err := p.Release(ctx); err != nil {
						t.Errorf("release: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	return int(peak.Load()), len(seen)
}
