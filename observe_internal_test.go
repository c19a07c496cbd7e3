package dlock

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// kindLog records the kinds of the events it observes (obstest.Recorder
// imports this package, so these tests cannot use it).
type kindLog struct {
	mu     sync.Mutex
	events []Event
}

func (k *kindLog) Observe(_ context.Context, e Event) {
	k.mu.Lock()
	k.events = append(k.events, e)
	k.mu.Unlock()
}

func (k *kindLog) all() []Event {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.events)
}

// A waiter without a native queue reports its wait once and each wake-up,
// saying whether the backend's signal or its timer woke it.
func TestObserverWaitWake(t *testing.T) {
	w := &watchingStub{stubDriver: newStub()}
	log := &kindLog{}
	l := NewLockerWith(w, &Options{Observer: log})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	other := NewLocker(w)
	defer other.Close()
	holder, err := other.TryAcquire(ctx, "a", &AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for w.watchCount() < 1 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		holder.Release(context.Background())
	}()
	l.watchLo, l.watchHi = time.Hour, time.Hour // only the release can wake it
	ls, err := l.Acquire(ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	var got []EventKind
	var wake Event
	for _, e := range log.all() {
		got = append(got, e.Kind)
		if e.Kind == EventWake {
			wake = e
		}
	}
	if want := []EventKind{EventAttempt, EventWait, EventWake, EventGranted}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	if !wake.Woken || wake.Elapsed < 15*time.Millisecond || wake.Backend != "stub" {
		t.Errorf("wake event = %+v: want woken by the release, 20ms after the attempt", wake)
	}
}
