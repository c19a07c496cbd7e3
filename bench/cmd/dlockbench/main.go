// Command dlockbench is dlock's comparative benchmark: it runs the same
// workloads on every backend and strategy, beside each server's raw round
// trip, each strategy's hand-written floor and the peer libraries, and
// writes a table, report.json, report.csv and index.html.
//
// Usage:
//
//	dlockbench [flags]                 start every server it can (internal/testenv) and run the suite
//	dlockbench -url URL [-url URL]...  run against servers you name instead
//
// Flags:
//
//	-quick          a short run (shorter measurements, 3 rounds; under two minutes without -workload scale)
//	-rounds N       rounds per workload (default 6, 3 with -quick): in each round
//	                every target runs one slice of the workload, the targets
//	                alternating, and every figure is the median of the rounds
//	                with a confidence interval (95 % from 6 rounds on)
//	-workload LIST  comma-separated: uncontended,manykeys,handoff,fairness,openloop,semaphore,scale (default all)
//	-backend LIST   only targets whose name or server starts with one of these (e.g. redis,postgres/advisory,memory)
//	-procs N        run the clients as N separate processes (this program re-executed) instead of goroutines
//	-warm-cpus      keep every CPU out of its idle state during the run with
//	                idle-priority spinners (SCHED_IDLE, Linux): on a VM whose
//	                idle vCPUs halt, a reply waits for one to wake, and the
//	                uncontended figures mix fast and slow phases
//	-pin-cpus WHEN  uncontended (default), all or off: during the
//	                uncontended workloads (or the whole run) the clients
//	                run on the first half of the CPUs and the servers
//	                dlockbench started on the other half (Linux); otherwise
//	                the kernel places each server process beside its client
//	                or not as it goes, and two connections doing the same
//	                work differ by up to 30 % on a small machine
//	-url URL        a dlock URL to measure (repeatable); its server's floor, round trip and peers run too
//	-out DIR        report directory (default "report")
//	-scale F        multiply every measurement's duration by F
//	-no-peers       leave out the peer libraries
//	-allow-missing  run without the backends whose server cannot start (by
//	                default a server that cannot start ends the run with
//	                status 1 and the reason)
//	-faults FILE    the fault suite's faults.json (cd faults && go run
//	                ./cmd/dlockchaos -out DIR): the safety table shows the
//	                violations it measured ("not run" without it)
//	-settle         before each timed slice of the contended workloads,
//	                wait (at most 1s) until the servers not under test are
//	                quiet (bench.Quiet); without it, what they did during
//	                each slice is still recorded
//
// See bench/README.md for what each column means.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/dlock-go/dlock/bench"
)

func main() {
	bench.ChildMain()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if err == flag.ErrHelp {
			return // -help: the usage is on standard output
		}
		fmt.Fprintln(os.Stderr, "dlockbench:", err)
		os.Exit(1)
	}
}

type urlList []string

func (u *urlList) String() string     { return strings.Join(*u, " ") }
func (u *urlList) Set(v string) error { *u = append(*u, v); return nil }

type config struct {
	quick    bool
	kinds    []string
	backends []string
	procs    int
	urls     urlList
	out      string
	scale    float64
	rounds   int
	noPeers  bool
	progress bool
	// allowMissing runs without the backends whose server cannot start.
	allowMissing bool
	warmCPUs     bool
	// pinCPUs is when the clients and servers run on CPUs of their own
	// (pinUncontended, pinAll, pinOff); pinSet: -pin-cpus was given.
	pinCPUs string
	pinSet  bool
	// settle waits for the servers not under test to be quiet before
	// each timed slice (bench.Quiet); off, it only watches them.
	settle bool
	// faults is the fault suite's faults.json, for the safety table.
	faults string
}

// usageHead is the start of -help's text; the flags follow it.
const usageHead = `dlockbench runs the same workloads on every dlock backend and strategy,
beside each server's raw round trip, each strategy's hand-written floor and
the peer libraries, and writes a table, report.json, report.csv and
index.html (see bench/README.md for every column).

Usage:
  dlockbench [flags]                 start every server it can and run the suite
  dlockbench -url URL [-url URL]...  run against servers you name instead

Each workload runs in rounds (-rounds): in each round every target runs one
short slice, the targets alternating, and each figure is the median of the
rounds with a confidence interval (95 % from 6 rounds on; the uncontended
workload runs at least 30 short rounds); ratios are paired per round.

Flags:
`

// serverPIDs lists the processes of the servers the run measures (those
// started here), for the machine's load: their CPU is the benchmark's own.
func serverPIDs(servers []*bench.Server) []int {
	var pids []int
	for _, s := range servers {
		if s.PID > 0 {
			pids = append(pids, s.PID)
		}
		pids = append(pids, serverPIDs(s.Nodes)...)
	}
	return pids
}

func parseFlags(args []string, stdout, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("dlockbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	var workloads, backends string
	fs.BoolVar(&c.quick, "quick", false, "a short run: shorter measurements, 3 rounds")
	fs.StringVar(&workloads, "workload", "all", "comma-separated workloads: "+strings.Join(bench.Kinds, ","))
	fs.StringVar(&backends, "backend", "", "only targets whose name or server starts with one of these (comma-separated)")
	fs.IntVar(&c.procs, "procs", 1, "run the clients as N processes (re-executing this program)")
	fs.Var(&c.urls, "url", "a dlock URL to measure (repeatable); replaces the servers dlockbench starts")
	fs.StringVar(&c.out, "out", "report", "report directory")
	fs.Float64Var(&c.scale, "scale", 1, "multiply every measurement's duration")
	fs.IntVar(&c.rounds, "rounds", 6, "rounds per workload, the targets alternating within each (default 3 with -quick)")
	fs.BoolVar(&c.noPeers, "no-peers", false, "leave out the peer libraries")
	fs.StringVar(&c.faults, "faults", "", "the fault suite's faults.json (written by faults/cmd/dlockchaos -out DIR) for the safety table's violations under faults")
	fs.BoolVar(&c.settle, "settle", false, "before each timed slice of the contended workloads, wait (at most 1s) until the servers not under test are quiet (without it, what they did during each slice is still recorded)")
	fs.BoolVar(&c.warmCPUs, "warm-cpus", false, "keep every CPU out of its idle state during the run with idle-priority spinners (SCHED_IDLE, Linux): on a VM whose idle vCPUs halt, replies wait for one to wake and the uncontended figures mix fast and slow phases")
	fs.StringVar(&c.pinCPUs, "pin-cpus", pinUncontended, "when to run the clients on the first half of the CPUs and the servers dlockbench started on the other half (Linux): uncontended (its workloads), all (the whole run) or off; unpinned, the kernel places each server process beside its client or not as it goes, and two connections doing the same work differ by up to 30 % on a small machine")
	fs.BoolVar(&c.allowMissing, "allow-missing", false, "run without the backends whose server cannot start (default: such a server ends the run with status 1)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" || a == "--" {
			if a != "--" {
				fs.SetOutput(stdout)
			}
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.kinds, err = bench.ParseKinds(workloads); err != nil {
		return nil, err
	}
	for _, b := range strings.Split(backends, ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.backends = append(c.backends, b)
		}
	}
	if c.procs < 1 || c.scale <= 0 || c.rounds < 1 {
		return nil, fmt.Errorf("-procs and -rounds must be at least 1 and -scale positive")
	}
	switch c.pinCPUs {
	case pinUncontended, pinAll, pinOff:
	default:
		return nil, fmt.Errorf("-pin-cpus %q: want uncontended, all or off", c.pinCPUs)
	}
	roundsSet := false
	fs.Visit(func(f *flag.Flag) {
		roundsSet = roundsSet || f.Name == "rounds"
		c.pinSet = c.pinSet || f.Name == "pin-cpus"
	})
	if c.quick && !roundsSet {
		c.rounds = 3
	}
	return c, nil
}

// wanted reports whether -backend selects a target (by its name, its
// server, or its family).
func (c *config) wanted(t bench.Target) bool {
	if len(c.backends) == 0 {
		return true
	}
	for _, b := range c.backends {
		if strings.HasPrefix(t.Name, b) || t.Server == b || t.Backend == b ||
			strings.HasPrefix(t.Name, "floor "+b) || strings.HasPrefix(t.Name, "rtt "+b) {
			return true
		}
	}
	return false
}

// wantServer reports whether any target of a family could be selected.
func (c *config) wantServer(family string) bool {
	if len(c.backends) == 0 {
		return true
	}
	for _, b := range c.backends {
		if strings.HasPrefix(b, family) || (family == "redis" && (b == "redsync" || b == "redislock")) ||
			(family == "zookeeper" && b == "zk.Lock") {
			return true
		}
	}
	return false
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	cfg.progress = isTerminal(stderr)
	started := time.Now()
	rep := &bench.Report{
		Started:    started,
		Command:    "dlockbench " + strings.Join(redactArgs(args), " "),
		GoVersion:  runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU:     runtime.NumCPU(),
		Quick:      cfg.quick,
		Procs:      cfg.procs,
		WarmCPUs:   cfg.warmCPUs,
		Rounds:     cfg.rounds,
		Peers:      bench.PeerNotes,
	}
	rep.Host, _ = os.Hostname()

	env, err := setup(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer env.close()
	rep.Servers = env.servers
	rep.Skipped = env.skipped

	if cfg.warmCPUs {
		// Before pinning: each spinner goes to a CPU of the whole set.
		stop, _, err := bench.WarmCPUs(runtime.NumCPU())
		if err != nil {
			return err
		}
		defer stop()
	}
	if cfg.pinCPUs != pinOff {
		pinner := newPinner(cfg, rep, serverPIDs(env.servers), stderr)
		env.pin = pinner
		defer pinner.unpin()
		if cfg.pinCPUs == pinAll {
			if err := pinner.pin(); err != nil {
				return err
			}
		}
	}
	plan := bench.Plan(bench.PlanOptions{Kinds: cfg.kinds, Quick: cfg.quick, Scale: cfg.scale})
	runner := &bench.Runner{Procs: cfg.procs, Stderr: stderr, Quiet: bench.NewQuiet(env.servers, cfg.settle)}
	load := bench.StartLoad(serverPIDs(env.servers)...)
	rows, paced, err := measure(ctx, cfg, env, plan, runner, stderr)
	if err != nil {
		return err
	}
	if rep.Load, err = load.Stop(); err != nil {
		fmt.Fprintf(stderr, "dlockbench: %v (no load figures)\n", err)
	}
	bench.Finalize(rows, env.targets, paced)
	if err := fillCaps(ctx, rows, env.targets); err != nil {
		fmt.Fprintln(stderr, "dlockbench: safety table incomplete:", err)
	}
	var faults map[string]int
	if cfg.faults != "" {
		if faults, err = bench.LoadFaultReport(cfg.faults); err != nil {
			return err
		}
	}
	rep.Rows, rep.Paced = rows, paced
	rep.Settle = runner.Quiet.Summary()
	rep.Verdict = bench.DecideFaults(rep, faults)
	rep.Duration = time.Since(started).Round(time.Second)
	rep.DurationS = rep.Duration.String()

	printHeader(stdout, rep)
	rep.Verdict.WriteText(stdout)
	rep.WriteTable(stdout)
	if err := rep.WriteFiles(cfg.out); err != nil {
		return err
	}
	var viol uint64
	for _, r := range rows {
		viol += r.Violations + r.FencingViolations
	}
	dir := cfg.out
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	fmt.Fprintf(stdout, "\nmutual-exclusion violations: %d\nreport: %s (index.html, report.json, report.csv); took %v\n",
		viol, dir, rep.Duration)
	if viol > 0 {
		return fmt.Errorf("%d mutual-exclusion or fencing violations", viol)
	}
	return nil
}

func printHeader(w io.Writer, rep *bench.Report) {
	fmt.Fprintf(w, "dlockbench  %s  %s GOMAXPROCS=%d", rep.Started.Format(time.RFC3339), rep.GoVersion, rep.GOMAXPROCS)
	if rep.Procs > 1 {
		fmt.Fprintf(w, "  clients in %d processes", rep.Procs)
	}
	if rep.WarmCPUs {
		fmt.Fprint(w, "  CPUs kept awake (-warm-cpus)")
	}
	if rep.ClientCPUs != "" {
		fmt.Fprintf(w, "  clients on CPU %s, servers on CPU %s (-pin-cpus %s)", rep.ClientCPUs, rep.ServerCPUs, rep.PinnedWorkloads)
	}
	fmt.Fprintln(w)
	for _, s := range rep.Servers {
		var kv []string
		for _, k := range sortedKeys(s.Settings) {
			kv = append(kv, k+"="+s.Settings[k])
		}
		fmt.Fprintf(w, "server %-16s %-22s %s\n", s.ID, s.Addr, strings.Join(kv, " "))
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
	if l := rep.Load; l != nil {
		fmt.Fprintf(w, "machine load: loadavg %.1f → %.1f; CPU busy %.0f %%, of which other processes %.0f %%\n",
			l.Avg1Start, l.Avg1End, l.BusyPct, l.OtherPct)
		if l.OtherPct > bench.NoisyLoad {
			fmt.Fprintf(w, "warning: other processes used %.0f %% of the CPU during the run: figures may be noisy\n", l.OtherPct)
		}
	}
	fmt.Fprintf(w, "%d rounds per workload, the targets alternating within each; a figure is the median of the rounds with a confidence interval (95 %% where the number of rounds allows)\n", rep.Rounds)
	fmt.Fprintln(w, "times are p50/p99 etc. of acquire (or release); ×floor, ×rtt, ×peer: this row's p50 lock use (acquire+release) over the floor's, the raw round trip's, the best peer's of each round; rate×peer: grants/s over the best peer's of each round; viol: exclusion/fencing violations")
}

// redactArgs hides passwords in -url values for the report.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if i > 0 && (args[i-1] == "-url" || args[i-1] == "--url") {
			out[i] = bench.Target{URL: a}.RedactedURL()
		} else if v, ok := strings.CutPrefix(a, "-url="); ok {
			out[i] = "-url=" + bench.Target{URL: v}.RedactedURL()
		}
	}
	return out
}
