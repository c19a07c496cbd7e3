package redis

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// waitMembers waits until c has want members or fewer.
func waitMembers(t *testing.T, c *crew, want int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.members.Load() > want {
		if time.Now().After(deadline) {
			t.Fatalf("crew has %d members, want at most %d", c.members.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCrewReusesItsMembers(t *testing.T) {
	c := newCrew(3)
	defer c.close()
	// A burst of 20 calls that all wait: 20 members, of which 3 stay.
	var wg sync.WaitGroup
	hold := make(chan struct{})
	wg.Add(20)
	for range 20 {
		c.run(func() { <-hold; wg.Done() })
	}
	if n := c.members.Load(); n != 20 {
		t.Fatalf("%d members for 20 concurrent calls, want 20", n)
	}
	close(hold)
	wg.Wait()
	waitMembers(t, c, 3)
	// One call at a time: idle members take them. A member may not be
	// back waiting yet when the next call comes (a new one starts then),
	// but that is rare: a crew that does not reuse starts one per call.
	started := c.started.Load()
	for range 200 {
		done := make(chan struct{})
		c.run(func() { close(done) })
		<-done
		time.Sleep(20 * time.Microsecond)
	}
	if n := c.started.Load() - started; n > 20 {
		t.Fatalf("%d members started for 200 calls one at a time, want at most 20 (the idle ones reused)", n)
	}
	waitMembers(t, c, 3)
}

func TestCrewCloseEndsItsMembers(t *testing.T) {
	c := newCrew(4)
	var wg sync.WaitGroup
	wg.Add(4)
	for range 4 {
		c.run(wg.Done)
	}
	wg.Wait()
	c.close()
	waitMembers(t, c, 0)
	// A call after close still runs, and leaves no member behind.
	ran := make(chan struct{})
	c.run(func() { close(ran) })
	<-ran
	waitMembers(t, c, 0)
	c.close() // twice is harmless
}

// TestRedlockCrewServesConcurrentAttempts: a Redlock Locker's crew keeps
// as many members as its clients' pools can serve requests at once, so
// that 32 goroutines acquiring and releasing distinct names, round after
// round, find members whose stacks have grown (a crew of a few members a
// node started new goroutines for most of their node calls, each growing
// its stack again).
func TestRedlockCrewServesConcurrentAttempts(t *testing.T) {
	ctx := testCtx(t)
	tg := redlockTarget(t, 3)
	drv := openDriver(t, ctx, tg)
	c := drv.(*redlock).crew
	const goroutines, rounds = 32, 10
	round := func() {
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				ls, err := drv.TryAcquire(ctx, driver.Request{Name: fmt.Sprintf("%s/%d", t.Name(), g), TTL: 10 * time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				if err := ls.Release(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	round() // the crew grows to the burst
	started := c.started.Load()
	for range rounds {
		round()
	}
	// Each round makes 32 attempts and 32 releases of 3 node calls.
	calls := int64(rounds * goroutines * 2 * len(tg.raw))
	if n := c.started.Load() - started; n > calls/10 {
		t.Fatalf("%d members started for %d node calls after the first round, want at most %d", n, calls, calls/10)
	}
}
