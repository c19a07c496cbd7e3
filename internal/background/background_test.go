package background

import (
	"sync/atomic"
	"testing"
	"time"
)

// Wait waits for every clean-up started before Stop; after Stop, Go runs
// its clean-up before returning.
func TestGroup(t *testing.T) {
	var g Group
	var ran atomic.Int32
	release := make(chan struct{})
	done := g.Go(func() { <-release; ran.Add(1) })
	select {
	case <-done:
		t.Fatal("Go waited for its clean-up")
	default:
	}
	g.Stop()
	waited := make(chan struct{})
	go func() { g.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned before a running clean-up ended")
	case <-time.After(20 * time.Millisecond):
	}
	inline := g.Go(func() { ran.Add(1) })
	select {
	case <-inline:
	default:
		t.Fatal("after Stop, Go returned before its clean-up ran")
	}
	close(release)
	<-waited
	<-done
	if n := ran.Load(); n != 2 {
		t.Fatalf("%d clean-ups ran, want 2", n)
	}
}
