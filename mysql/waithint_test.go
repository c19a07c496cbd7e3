package mysql

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestVersionHintAge: a version attempt refused by a held lease answers a
// wait (RetryAfter) from the holder's lease age, on a known name (its
// take) as on a name the Locker has not seen.
func TestVersionHintAge(t *testing.T) {
	srv := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() *dlock.Locker {
		l, err := dlock.Open(ctx, srv.URL+"?strategy=version")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	a, b := open(), open()
	const name = "waithint-age"
	lease, err := a.Acquire(ctx, name, &dlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	for i, want := range []bool{false, true} { // the first attempt creates the row: no age
		_, err := b.TryAcquire(ctx, name, nil)
		var na *driver.NotAcquiredError
		if !errors.As(err, &na) {
			t.Fatalf("attempt %d: %v, want a NotAcquiredError", i, err)
		}
		if got := na.RetryAfter > 0; got != want {
			t.Errorf("attempt %d: RetryAfter %v; want a hint: %v", i, na.RetryAfter, want)
		}
		if na.RetryAfter > 100*time.Millisecond {
			t.Errorf("attempt %d: RetryAfter %v; a hint never exceeds the backoff's cap", i, na.RetryAfter)
		}
	}
}

// TestVersionHint: the rules of the next wait's choice.
func TestVersionHint(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct {
		name           string
		hold           time.Duration // this Locker's holds (0: none)
		waited         time.Duration // this wait so far, before the refusal
		age, rtt, want time.Duration
		explanation    string
	}{
		{"no hold", 0, 0, 7 * ms, ms, 7 * ms, "without a hold of its own, the holder's age"},
		{"no hold, young holder", 0, 0, 100 * time.Microsecond, ms, ms, "never under the portable layer's shortest wait"},
		{"no hold, long wait", 0, 30 * ms, 2 * ms, ms, 15 * ms, "never under half the wait so far"},
		{"release", 10 * ms, 0, 3 * ms, ms, 6 * ms, "the holder's release: hold − age − round trip"},
		{"released soon", 10 * ms, 0, 9 * ms, ms, ms, "a release within the shortest wait: that wait"},
		{"long wait", 10 * ms, 40 * ms, 3 * ms, ms, 28 * ms, "half the wait so far at least, on a later holder's release (6 + 2 × 11 ms)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := dialect{hints: &waitHints{}}
			if c.hold > 0 {
				d.VersionHeld("x", c.hold)
			}
			if c.waited > 0 {
				e := d.hints.entry("x")
				e.since, e.last = time.Now().Add(-c.waited), time.Now()
			}
			got := d.VersionHint("x", c.age, c.rtt)
			if got < c.want-ms/2 || got > c.want+ms/2 {
				t.Errorf("VersionHint = %v, want %v: %s", got, c.want, c.explanation)
			}
		})
	}
}

// TestVersionHintWaits: a grant ends a wait, and a refusal long after
// the last one starts a new one.
func TestVersionHintWaits(t *testing.T) {
	d := dialect{hints: &waitHints{}}
	e := d.hints.entry("x")
	e.since, e.last = time.Now().Add(-time.Second), time.Now()
	if got := d.VersionHint("x", 0, 0); got < 400*time.Millisecond {
		t.Fatalf("VersionHint = %v after a wait of a second; want half of it at least", got)
	}
	d.VersionGranted("x")
	if got := d.VersionHint("x", 0, 0); got != minHint {
		t.Errorf("VersionHint = %v after a grant; want the shortest wait: the wait starts again", got)
	}
	e.since, e.last = time.Now().Add(-time.Second), time.Now().Add(-2*waitGap)
	if got := d.VersionHint("x", 0, 0); got != minHint {
		t.Errorf("VersionHint = %v after a refusal long ago; want the shortest wait: a new wait", got)
	}
	if got := (dialect{}).VersionHint("x", time.Second, 0); got != 0 {
		t.Errorf("VersionHint of a dialect without a Locker = %v, want 0", got)
	}
}
