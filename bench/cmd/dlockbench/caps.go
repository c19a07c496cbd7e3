package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/bench"
	"github.com/dlock-go/dlock/driver"
)

// capsTimeout bounds the one Open that reads a target's capabilities.
const capsTimeout = 30 * time.Second

// fillCaps sets Caps on every measured dlock row: what its driver
// declares (fencing, fairness, how waiters are woken, how soon a crashed
// holder's lock is free), for the verdict's safety table. Each target is
// opened once, by its real URL (rows hold only the redacted one), and
// closed at once. A target that cannot be opened keeps nil Caps (the
// table then says "?"); the reasons are returned joined, for the
// terminal: a missing fact is not a reason to lose the run.
func fillCaps(ctx context.Context, rows []*bench.Row, targets []bench.Target) error {
	caps := map[string]*driver.Capabilities{}
	var errs []error
	for _, t := range targets {
		if t.Kind != bench.KindDlock || !needsCaps(rows, t.Name) {
			continue
		}
		c, err := capsOf(ctx, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		caps[t.Name] = c
	}
	for _, r := range rows {
		if r.Kind == bench.KindDlock && r.Skipped == "" {
			r.Caps = caps[r.Backend]
		}
	}
	return errors.Join(errs...)
}

// needsCaps reports whether some measured row is the target's.
func needsCaps(rows []*bench.Row, name string) bool {
	for _, r := range rows {
		if r.Backend == name && r.Kind == bench.KindDlock && r.Skipped == "" {
			return true
		}
	}
	return false
}

// capsOf opens a target once and returns what its driver declares.
func capsOf(ctx context.Context, t bench.Target) (*driver.Capabilities, error) {
	octx, cancel := context.WithTimeout(ctx, capsTimeout)
	defer cancel()
	l, err := dlock.Open(octx, t.URL)
	if err != nil {
		return nil, fmt.Errorf("capabilities of %s: %w", t.Name, err)
	}
	c := l.Capabilities()
	if err := l.Close(); err != nil {
		return nil, fmt.Errorf("capabilities of %s: close: %w", t.Name, err)
	}
	return &c, nil
}
