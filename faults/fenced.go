package faults

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/dlock-go/dlock/conformance"
)

// The fenced register and the fenced-mutex checker are the conformance
// package's: this file only converts a run's history to its operations.

// fencedOps converts h to the conformance checker's operations. Every
// grant that ended neither by a successful release nor by a reported loss
// (its holder was killed, its release failed, the run ended) gets a loss.
// Its window runs from the acquire's call (the server may grant and drop a
// lease, an eviction say, before the client hears of the grant) to the
// moment its holder learned of the loss, or else to the return of the next
// grant: a correct backend had dropped it by then. The model places the
// loss anywhere in that window, so the conversion never invents a
// violation nor hides one: fencing violations (a token that goes back, a
// stale write accepted) remain violations.
//
// In a semaphore run (permits > 0) the next grant may have taken another
// permit, so such a loss's window stays open to the end of the history.
func fencedOps(h *History, permits int) []conformance.Op {
	var ops []conformance.Op
	released := map[[2]int]bool{}
	for _, op := range h.Ops {
		c := conformance.Op{Client: op.Client, Token: op.Token, OK: op.OK, Call: op.Call, Return: op.Return}
		switch op.Kind {
		case "acquire":
			c.Kind = conformance.OpAcquire
		case "release":
			c.Kind = conformance.OpRelease
			if op.OK {
				released[[2]int{op.Client, op.Lease}] = true
			}
		case "write":
			c.Kind = conformance.OpWrite
		default:
			continue
		}
		ops = append(ops, c)
	}
	grants := make([]*LeaseRec, len(h.Leases))
	copy(grants, h.Leases)
	sort.SliceStable(grants, func(i, j int) bool { return grants[i].Granted < grants[j].Granted })
	for i, l := range grants {
		if released[[2]int{l.Client, l.Seq}] {
			continue
		}
		ret := int64(-1)
		if l.DoneKind == kindLost && l.DoneAt >= 0 {
			ret = l.DoneAt
		} else if i+1 < len(grants) && permits == 0 {
			ret = grants[i+1].Granted
		}
		if ret >= 0 && ret < l.Called {
			ret = l.Called // porcupine needs Call <= Return
		}
		ops = append(ops, conformance.Op{Client: l.Client, Kind: conformance.OpLost, Token: l.Token, OK: true, Call: l.Called, Return: ret})
	}
	return ops
}

// checkFenced runs the conformance fenced-mutex checker over h; the
// visualisation of a failing history goes to dir.
func checkFenced(h *History, res *Result, fencing bool, permits int, dir string, timeout time.Duration) {
	name := strings.ReplaceAll(res.Backend, "/", "-") + "-" + res.Fault
	opts := conformance.FencedOptions{Fencing: fencing, Dir: dir, Name: name, Timeout: timeout}
	var err error
	if permits > 0 {
		err = conformance.CheckFencedSemaphore(fencedOps(h, permits), permits, opts)
	} else {
		err = conformance.CheckFenced(fencedOps(h, 0), opts)
	}
	var fe *conformance.FencedError
	switch {
	case err == nil:
		res.FencedViolations = 0
	case errors.As(err, &fe):
		// porcupine judges the history as a whole: 1 means "not
		// linearizable", with the visualisation showing where.
		res.FencedViolations = 1
		res.Visualization = fe.Visualization
		if fe.Visualization != "" {
			res.FencedNote = "see " + filepath.Base(fe.Visualization)
		}
	default:
		res.FencedViolations = -1
		res.FencedNote = fmt.Sprintf("checker: %v", err)
	}
	if !fencing {
		res.FencedNote = strings.TrimSpace("backend declares no fencing: mutex part only. " + res.FencedNote)
	}
}
