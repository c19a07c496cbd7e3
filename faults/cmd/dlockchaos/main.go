// Command dlockchaos runs dlock's fault-injection suite (package
// github.com/dlock-go/dlock/faults) for as long as wanted: client
// processes loop acquire → fenced write → hold → release on one lock while
// faults are injected, and the histories are checked.
//
// Usage:
//
//	dlockchaos [flags]
//
// For example, ten minutes of every fault against Redis:
//
//	go run ./cmd/dlockchaos -duration 10m -backend redis
//
// -duration is the time per backend; it is shared among the backend's
// runs (its strategies × the selected faults), each lasting at least -run. The report is
// written to -out as faults.txt, faults.json and faults.html (a
// self-contained page the benchmark report can link), with the history of
// every failing run and porcupine's visualisation of it. The exit status
// is 1 when a run broke an assertion (a fenced violation, a lost lease not
// signalled, a recovery beyond the backend's bound).
//
// Flags:
//
//	-backend   comma-separated backends (redis, redlock, zookeeper,
//	           zookeeper-ensemble, postgres, mysql); default all
//	-fault     comma-separated faults (see -list); default all
//	-duration  time per backend (default 0: each run lasts -run)
//	-run       minimum time per run (default 5s)
//	-every     interval between injections within a run (default 2s)
//	-ttl       lease TTL (default 1s)
//	-clients   client processes per run (default 5)
//	-parallel  backends at a time (default 1)
//	-out       report directory (default dlockchaos-out)
//	-list      list backends and faults and exit
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/faults"
)

func main() {
	faults.ChildMain() // a client process of a run: never returns
	os.Exit(run())
}

func run() int {
	var (
		backends = flag.String("backend", "", "comma-separated backends (default all)")
		fs       = flag.String("fault", "", "comma-separated faults (default all)")
		duration = flag.Duration("duration", 0, "time per backend, shared among its faults")
		perRun   = flag.Duration("run", 5*time.Second, "minimum time per run")
		every    = flag.Duration("every", 2*time.Second, "interval between injections")
		ttl      = flag.Duration("ttl", time.Second, "lease TTL")
		clients  = flag.Int("clients", 5, "client processes per run")
		parallel = flag.Int("parallel", 1, "backends at a time")
		out      = flag.String("out", "dlockchaos-out", "report directory")
		list     = flag.Bool("list", false, "list backends and faults and exit")
		quiet    = flag.Bool("q", false, "no progress lines")
		permits  = flag.Int("permits", 2, "permits of the semaphore runs (at most 8; -1: no semaphore runs)")
		semFs    = flag.String("semaphore-faults", "kill,pause", "comma-separated faults of the semaphore runs")
	)
	flag.Parse()
	if *list {
		for _, b := range faults.Backends() {
			fmt.Printf("backend %s\n", b.Name)
		}
		for _, f := range faults.Catalogue() {
			fmt.Printf("fault %-13s %s\n", f.Name, f.Doc)
		}
		return 0
	}
	opts := faults.Options{
		Backends: split(*backends), Faults: split(*fs),
		Clients: *clients, TTL: *ttl, Duration: *perRun, Every: *every,
		Parallel: *parallel, Dir: *out, Command: "dlockchaos " + strings.Join(os.Args[1:], " "),
		Permits: *permits, SemaphoreFaults: split(*semFs),
	}
	if *permits > faults.MaxPermits {
		fmt.Fprintf(os.Stderr, "dlockchaos: -permits %d: the checker models at most %d\n", *permits, faults.MaxPermits)
		return 2
	}
	if opts.SemaphoreFaults == nil {
		opts.SemaphoreFaults = []string{}
	}
	for _, f := range opts.SemaphoreFaults {
		if faults.FaultByName(f) == nil {
			fmt.Fprintf(os.Stderr, "dlockchaos: unknown fault %q in -semaphore-faults (see -list)\n", f)
			return 2
		}
	}
	for _, b := range opts.Backends {
		if faults.BackendByName(b) == nil {
			fmt.Fprintf(os.Stderr, "dlockchaos: unknown backend %q (see -list)\n", b)
			return 2
		}
	}
	for _, f := range opts.Faults {
		if faults.FaultByName(f) == nil {
			fmt.Fprintf(os.Stderr, "dlockchaos: unknown fault %q (see -list)\n", f)
			return 2
		}
	}
	opts.BackendDuration = *duration
	if !*quiet {
		opts.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := faults.Suite(ctx, opts)
	if rep == nil {
		fmt.Fprintln(os.Stderr, "dlockchaos:", err)
		return 2
	}
	_ = rep.WriteText(os.Stdout)
	if serr := rep.Save(*out); serr != nil {
		fmt.Fprintln(os.Stderr, "dlockchaos:", serr)
		return 2
	}
	fmt.Fprintf(os.Stderr, "report: %s/faults.html\n", *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlockchaos:", err)
		return 2
	}
	if rep.Failed() {
		return 1
	}
	return 0
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
