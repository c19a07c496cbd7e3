package sqllock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPersisterCovers: every persist call returns only after a run that
// started after the call succeeded, and concurrent calls share runs.
func TestPersisterCovers(t *testing.T) {
	var started atomic.Int64 // runs started
	var finished sync.Map    // run number → finish time
	p := newPersister(func(ctx context.Context) error {
		n := started.Add(1)
		time.Sleep(2 * time.Millisecond)
		finished.Store(n, time.Now())
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	const callers = 64
	for range callers {
		wg.Go(func() {
			before := started.Load() // runs that may have started before the call
			if err := p.persist(ctx); err != nil {
				t.Error(err)
				return
			}
			// Some run numbered after before must have finished by now.
			ok := false
			for n := before + 1; n <= started.Load(); n++ {
				if at, done := finished.Load(n); done && !at.(time.Time).After(time.Now()) {
					ok = true
					break
				}
			}
			if !ok {
				t.Errorf("persist returned with no run started after the call finished (runs before: %d)", before)
			}
		})
	}
	wg.Wait()
	if n := started.Load(); n >= callers {
		t.Errorf("%d runs for %d concurrent callers: runs are not shared", n, callers)
	}
	t.Logf("%d runs for %d callers", started.Load(), callers)
}

// TestPersisterError: a failed run fails its caller; the next call runs
// again.
func TestPersisterError(t *testing.T) {
	fail := errors.New("boom")
	var calls atomic.Int64
	p := newPersister(func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			return fail
		}
		return nil
	})
	if err := p.persist(context.Background()); !errors.Is(err, fail) {
		t.Fatalf("first persist: %v, want %v", err, fail)
	}
	if err := p.persist(context.Background()); err != nil {
		t.Fatalf("second persist: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.sem <- struct{}{} // a run in progress
	cancel()
	if err := p.persist(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("persist with a cancelled ctx while a run is in progress: %v", err)
	}
	<-p.sem
}
