// Package obstest records what a dlock.Observer sees, for the tests of
// the portable layer, the drivers and the adapters.
package obstest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Recorder is a dlock.Observer that keeps every Event.
type Recorder struct {
	mu     sync.Mutex
	events []dlock.Event
}

// Observe records e.
func (r *Recorder) Observe(_ context.Context, e dlock.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns the events recorded so far, of the given kinds (all
// when none is given).
func (r *Recorder) Events(kinds ...dlock.EventKind) []dlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []dlock.Event
	for _, e := range r.events {
		if len(kinds) == 0 || contains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

// Kinds returns the kinds of the events of acquisition id, in order.
func (r *Recorder) Kinds(id uint64) []dlock.EventKind {
	var out []dlock.EventKind
	for _, e := range r.Events() {
		if e.ID == id {
			out = append(out, e.Kind)
		}
	}
	return out
}

// Text returns every event as text (its fields, its error and message), to
// check that a secret appears nowhere.
func (r *Recorder) Text() string {
	var b strings.Builder
	for _, e := range r.Events() {
		fmt.Fprintf(&b, "%+v\n", e)
		if e.Err != nil {
			fmt.Fprintf(&b, "%v\n", e.Err)
		}
	}
	return b.String()
}

func contains(kinds []dlock.EventKind, k dlock.EventKind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

// WaitFor waits until n events of kind have been recorded, or fails the
// test after 10s. (A lease's Done closes before its EventLost is
// observed: the loss signal comes first.)
func (r *Recorder) WaitFor(t testing.TB, kind dlock.EventKind, n int) []dlock.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := r.Events(kind); len(got) >= n || time.Now().After(deadline) {
			if len(got) < n {
				t.Fatalf("%d %v events after 10s, want %d; all events: %+v", len(got), kind, n, r.Events())
			}
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

// ClientLogsOffStderr runs f, which makes a Locker observed by rec meet a
// broken connection, with stderr captured. It fails t if f printed
// anything there or if rec got no EventClientLog, or the first is not
// backend's with a message containing want; it returns those events.
func ClientLogsOffStderr(t testing.TB, rec *Recorder, backend, want string, f func()) []dlock.Event {
	t.Helper()
	if out := CaptureStderr(t, f); out != "" {
		t.Errorf("a Locker opened from a URL printed %q to stderr, want nothing", out)
	}
	logs := rec.Events(dlock.EventClientLog)
	if len(logs) == 0 {
		t.Fatalf("no EventClientLog; events: %v", rec.Events())
	}
	if logs[0].Backend != backend || logs[0].Message == "" || !strings.Contains(logs[0].Message, want) {
		t.Errorf("client log event = %+v, want %s's line containing %q", logs[0], backend, want)
	}
	return logs
}
