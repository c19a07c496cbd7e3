package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlock-go/dlock/bench"
)

// runOverhead estimates what a run costs beyond its measured time
// (connecting clients, warming up, stopping), for the progress estimate.
const runOverhead = 400 * time.Millisecond

type job struct {
	t bench.Target
	w bench.Workload
}

// measure runs every workload on every target that takes part in it:
// floors and round trips in the uncontended workload only.
func measure(ctx context.Context, cfg *config, e *env, plan []bench.Workload, r *bench.Runner, stderr io.Writer) ([]*bench.Row, error) {
	var jobs []job
	for _, w := range plan {
		for _, t := range e.targets {
			if t.Runs(w.Kind) {
				jobs = append(jobs, job{t, w})
			}
		}
	}
	var total, done time.Duration
	for _, j := range jobs {
		total += j.w.Duration + runOverhead
	}
	pb := &progress{w: stderr, on: cfg.progress, start: time.Now()}
	capacity := map[string]float64{} // target → many-keys grants/s at 4×GOMAXPROCS clients
	broken := map[string]string{}    // target → why it is no longer run
	capClients := 4 * runtime.GOMAXPROCS(0)
	var rows []*bench.Row
	lastKind := ""
	for i, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		if j.w.Kind != lastKind && !cfg.progress {
			fmt.Fprintf(stderr, "dlockbench: %s (%s)\n", j.w.Kind, time.Now().Format("15:04:05"))
			lastKind = j.w.Kind
		}
		pb.show(i, len(jobs), done, total, j.t.Name+" · "+j.w.Label())
		w := j.w
		if why, ok := broken[j.t.Name]; ok {
			rows = append(rows, bench.SkippedRow(j.t, w, "not run after an earlier failure: "+why))
			done += w.Duration + runOverhead
			continue
		}
		if w.Kind == bench.OpenLoop {
			c, ok := capacity[j.t.Name]
			if !ok {
				probe := bench.Workload{Kind: bench.ManyKeys, Clients: w.Clients, Names: w.Names, Duration: w.Duration}
				if res, err := r.Run(ctx, j.t, probe, nil); err == nil {
					c = bench.NewRow(res).GrantsPerSec
					capacity[j.t.Name] = c
				}
			}
			if c <= 0 {
				rows = append(rows, bench.SkippedRow(j.t, w, "no capacity measured"))
				done += w.Duration + runOverhead
				continue
			}
			w.Rate = w.Load * c
		}
		res, err := r.Run(ctx, j.t, w, sampler(e, j.t))
		done += j.w.Duration + runOverhead
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			rows = append(rows, bench.SkippedRow(j.t, w, err.Error()))
			if errors.Is(err, bench.ErrStuck) {
				// Each further run would wait out the same timeouts.
				broken[j.t.Name] = j.w.Label() + ": " + bench.ErrStuck.Error()
			}
			continue
		}
		row := bench.NewRow(res)
		if w.Kind == bench.ManyKeys && w.Clients == capClients {
			capacity[j.t.Name] = row.GrantsPerSec
		}
		rows = append(rows, row)
	}
	pb.clear()
	if err := ctx.Err(); err != nil && len(rows) == 0 {
		return nil, err
	}
	return rows, nil
}

// sampler returns the server-counter reader of t's server, or nil.
func sampler(e *env, t bench.Target) func(context.Context) bench.ServerSample {
	s := e.byID[t.Server]
	if s == nil {
		return nil
	}
	return func(ctx context.Context) bench.ServerSample {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return s.Sample(sctx)
	}
}

// progress draws a one-line progress bar on a terminal; it is silent
// when the output is not one.
type progress struct {
	w     io.Writer
	on    bool
	start time.Time
	width int
}

func (p *progress) show(i, n int, done, total time.Duration, what string) {
	if !p.on {
		return
	}
	frac := 0.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	const bar = 28
	filled := int(frac * bar)
	eta := "…"
	if el := time.Since(p.start); done > 0 {
		eta = (time.Duration(float64(el)/float64(done)*float64(total-done)) + 0).Round(time.Second).String() + " left"
	}
	line := fmt.Sprintf("[%s%s] %d/%d %s  %s", strings.Repeat("#", filled), strings.Repeat(".", bar-filled), i+1, n, eta, what)
	if len(line) > 110 {
		line = line[:110]
	}
	pad := max(p.width-len([]rune(line)), 0)
	p.width = len([]rune(line))
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
}

func (p *progress) clear() {
	if p.on && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
