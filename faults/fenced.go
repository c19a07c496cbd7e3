package faults

import (
	"errors"
	"time"
)

// fencedRegister is the protected resource: it accepts a write only with a
// token at least as high as every token it accepted before.
//
// TODO(conformance): replace with the conformance package's fenced
// register once it lands.
type fencedRegister struct{ max uint64 }

func newRegister() fencedRegister { return fencedRegister{} }

// Write reports whether a write with token was accepted.
func (r *fencedRegister) Write(token uint64, _ any) error {
	if token < r.max {
		return errStale
	}
	r.max = token
	return nil
}

var errStale = errors.New("faults: stale token")

// checkFenced runs the fenced-mutex checker over h.
func checkFenced(h *History, res *Result, fencing bool, dir string, timeout time.Duration) {
	res.FencedViolations = -1
	res.FencedNote = "conformance checker not available yet"
}
