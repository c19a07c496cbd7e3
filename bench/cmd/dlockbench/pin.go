package main

import (
	"fmt"
	"io"

	"github.com/dlock-go/dlock/bench"
)

// -pin-cpus values.
const (
	pinUncontended = "uncontended" // during the uncontended workloads
	pinAll         = "all"         // the whole run
	pinOff         = "off"
)

// pinner pins the clients and the servers dlockbench started to CPUs of
// their own (bench.PinCPUs) when asked, and records it in the report.
// Where pinning cannot be done (one CPU, servers named with -url, not
// Linux) a default -pin-cpus runs unpinned and says so; a -pin-cpus given
// on the command line fails the run instead.
type pinner struct {
	mode     string
	explicit bool
	servers  []int
	rep      *bench.Report
	stderr   io.Writer
	p        *bench.Pinning
	refused  bool
}

func newPinner(cfg *config, rep *bench.Report, servers []int, stderr io.Writer) *pinner {
	return &pinner{mode: cfg.pinCPUs, explicit: cfg.pinSet, servers: servers, rep: rep, stderr: stderr}
}

// pin pins, unless pinned already or refused before.
func (pn *pinner) pin() error {
	if pn == nil || pn.p != nil || pn.refused {
		return nil
	}
	p, err := bench.PinCPUs(pn.servers)
	if err != nil {
		if pn.explicit {
			return fmt.Errorf("-pin-cpus %s: %w", pn.mode, err)
		}
		pn.refused = true
		fmt.Fprintf(pn.stderr, "dlockbench: clients and servers not pinned to CPUs of their own: %v\n", err)
		return nil
	}
	pn.p = p
	pn.rep.ClientCPUs, pn.rep.ServerCPUs = bench.FormatCPUs(p.Client), bench.FormatCPUs(p.Server)
	pn.rep.PinnedWorkloads = pn.mode
	return nil
}

// unpin lets everything run on every CPU again.
func (pn *pinner) unpin() {
	if pn == nil || pn.p == nil {
		return
	}
	if err := pn.p.Unpin(); err != nil {
		fmt.Fprintf(pn.stderr, "dlockbench: %v\n", err)
	}
	pn.p = nil
}
