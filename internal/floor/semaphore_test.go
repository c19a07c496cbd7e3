package floor

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

// A semaphore floor never has more than N holders; holders wait and all
// get a permit; a permit granted after another was released has a larger
// token; a waiter whose context ends leaves nothing (the others go on).
func TestSemaphoreFloors(t *testing.T) {
	for _, c := range []struct {
		backend string
		server  func(testing.TB) *testenv.Server
	}{
		{"redis", testenv.Redis},
		{"zookeeper", testenv.ZooKeeper},
		{"postgres", testenv.Postgres},
		{"mysql", testenv.MySQL},
	} {
		t.Run(c.backend, func(t *testing.T) {
			if AboutSemaphore(c.backend) == "" {
				t.Fatalf("AboutSemaphore(%q) is empty", c.backend)
			}
			srv := c.server(t)
			ctx := testenv.Context(t, time.Minute)
			const permits, clients, rounds = 2, 6, 8
			name := "semtest-" + rand.Text()
			var sems []*Semaphore
			for range clients {
				s, err := OpenSemaphore(ctx, srv.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				sems = append(sems, s)
			}
			// A cancelled waiter while every permit is held.
			var held []*Grant
			for _, s := range sems[:permits] {
				g, err := s.Acquire(ctx, name, permits)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, g)
			}
			cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			if g, err := sems[permits].Acquire(cctx, name, permits); err == nil {
				t.Fatalf("a third holder of %d permits (token %d)", permits, g.Token())
			}
			cancel()
			maxDone := uint64(0)
			for _, g := range held {
				maxDone = max(maxDone, g.Token())
				if err := g.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}

			var (
				inside, most atomic.Int64
				mu           sync.Mutex
				released     = maxDone // the largest token released so far
				wg           sync.WaitGroup
			)
			for i, s := range sems {
				wg.Go(func() {
					for range rounds {
						mu.Lock()
						floor := released
						mu.Unlock()
						g, err := s.Acquire(ctx, name, permits)
						if err != nil {
							t.Errorf("client %d: %v", i, err)
							return
						}
						n := inside.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						if g.Token() <= floor {
							t.Errorf("token %d granted after token %d was released", g.Token(), floor)
						}
						time.Sleep(2 * time.Millisecond)
						inside.Add(-1)
						mu.Lock()
						released = max(released, g.Token())
						mu.Unlock()
						if err := g.Release(ctx); err != nil {
							t.Errorf("client %d: release: %v", i, err)
						}
					}
				})
			}
			wg.Wait()
			if m := most.Load(); m > permits {
				t.Errorf("%d holders at once, want at most %d", m, permits)
			} else if m < 2 {
				t.Errorf("never two holders at once with %d permits and %d clients", permits, clients)
			}
		})
	}
}
