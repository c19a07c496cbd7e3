package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/bench"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestFillCaps opens real targets (mem:// and a Redis from testenv) and
// checks that each dlock row gets its driver's capabilities, that other
// rows get none, and that a target that cannot be opened is reported
// without losing the others.
func TestFillCaps(t *testing.T) {
	srv := testenv.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	targets := []bench.Target{
		bench.MemoryTarget(),
		{Name: "redis", Kind: bench.KindDlock, URL: srv.URL, Backend: "redis"},
		{Name: "floor redis", Kind: bench.KindFloor, Impl: "redis-floor", URL: srv.URL, Backend: "redis"},
		// An unknown parameter: Open refuses the URL.
		{Name: "redis+bad", Kind: bench.KindDlock, URL: "redis://:hunter2@127.0.0.1:1/0?bogus=1", Backend: "redis"},
	}
	rows := []*bench.Row{
		{Backend: "memory", Kind: bench.KindDlock, Label: bench.Uncontended},
		{Backend: "redis", Kind: bench.KindDlock, Label: bench.Uncontended},
		{Backend: "redis", Kind: bench.KindDlock, Label: bench.SafetyHandoff},
		{Backend: "floor redis", Kind: bench.KindFloor, Label: bench.Uncontended},
		{Backend: "redis+bad", Kind: bench.KindDlock, Label: bench.Uncontended},
	}
	err := fillCaps(ctx, rows, targets)
	if err == nil || !strings.Contains(err.Error(), "redis+bad") {
		t.Errorf("fillCaps: err = %v, want the target that could not be opened named", err)
	} else if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the error shows the password: %v", err)
	}
	want := map[string]func(*driver.Capabilities) bool{
		"memory": func(c *driver.Capabilities) bool { return c.Backend == "memory" && c.Fair },
		"redis": func(c *driver.Capabilities) bool {
			return c.Backend == "redis" && c.Fencing && c.ReleaseOnCrash == driver.ReleaseAfterTTL
		},
	}
	for _, r := range rows {
		check, ok := want[r.Backend]
		switch {
		case !ok && r.Caps != nil:
			t.Errorf("%s (%s): caps %+v, want none", r.Backend, r.Kind, r.Caps)
		case ok && (r.Caps == nil || !check(r.Caps)):
			t.Errorf("%s on %s: caps %+v, not its driver's", r.Backend, r.Label, r.Caps)
		}
	}
	// The verdict's safety table reads them.
	v := bench.Decide(&bench.Report{Rows: rows})
	for _, s := range v.Safety {
		if s.Target == "redis" && (s.Fencing != "yes" || s.FreedAfterCrash != "TTL") {
			t.Errorf("safety row of redis: %+v", s)
		}
	}
}
