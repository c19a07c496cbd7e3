package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/bench"
	"github.com/dlock-go/dlock/internal/testenv"
)

func TestMain(m *testing.M) {
	bench.ChildMain()
	os.Exit(testenv.Run(m))
}

// TestQuickSmoke is CI's smoke test of the command: -quick, one workload,
// one backend (mem://, no server needed), no timing assertions.
func TestQuickSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, dir, out, errb := runReport(t, ctx, "-quick", "-workload", "uncontended", "-backend", "memory")
	for _, want := range []string{"== uncontended", "memory", "mutual-exclusion violations: 0", "machine load: loadavg", "3 rounds per workload"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(errb, "\r") {
		t.Error("a progress bar was drawn although stderr is not a terminal")
	}
	// One row on one name, one on fresh names.
	if len(rep.Rows) != 2 {
		t.Fatalf("report has %d rows, want the memory rows of uncontended and %s", len(rep.Rows), bench.FreshLabel)
	}
	for i, label := range []string{bench.Uncontended, bench.FreshLabel} {
		if r := rep.Rows[i]; r.Backend != "memory" || r.Label != label || r.Grants == 0 {
			t.Fatalf("row %d = %s on %q with %d grants, want memory measured on %q", i, r.Backend, r.Label, r.Grants, label)
		}
	}
	if rep.Rounds != 3 || rep.Load == nil {
		t.Errorf("report: %d rounds, load %+v; want -quick's 3 rounds and the machine's load", rep.Rounds, rep.Load)
	}
	if u := rep.Rows[0].Use; u == nil || u.Rounds < 3 {
		t.Errorf("memory's lock use = %+v; want an interval over the rounds", u)
	}
	for _, f := range []string{"report.csv", "index.html"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestContendedRounds runs the contended workloads on mem:// in rounds:
// every row is built from one slice per round, and the open loop finds
// its capacity by itself when the many-keys workload did not run.
func TestContendedRounds(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"-quick", "-rounds", "4", "-workload", "handoff,fairness,openloop", "-backend", "memory", "-scale", "0.2", "-out", dir}
	if err := run(t.Context(), args, &out, &errb); err != nil {
		t.Fatalf("dlockbench: %v\n%s\n%s", err, out.String(), errb.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Rounds int `json:"rounds"`
		Rows   []struct {
			Label   string         `json:"label"`
			Skipped string         `json:"skipped"`
			Params  map[string]any `json:"params"`
			Rate    *struct {
				Rounds int `json:"rounds"`
			} `json:"grants_per_sec"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Rounds != 4 || len(rep.Rows) != 6 { // handoff ×4, fairness, openloop
		t.Fatalf("%d rounds, %d rows; want 4 rounds and 6 rows:\n%s", rep.Rounds, len(rep.Rows), out.String())
	}
	for _, r := range rep.Rows {
		if r.Skipped != "" || r.Rate == nil || r.Rate.Rounds != 4 || r.Params["rounds"] != 4.0 {
			t.Errorf("%s: skipped %q, rate %+v, params %v; want a rate over 4 rounds", r.Label, r.Skipped, r.Rate, r.Params)
		}
		if strings.HasPrefix(r.Label, "openloop") {
			if rate, _ := r.Params["rate_per_sec"].(float64); rate <= 0 {
				t.Errorf("%s: offered %v/s; want a share of the capacity the probe measured", r.Label, r.Params["rate_per_sec"])
			}
		}
	}
}

func TestFlagsRejectNonsense(t *testing.T) {
	for _, args := range [][]string{
		{"-workload", "nosuch"},
		{"-procs", "0"},
		{"-rounds", "0"},
		{"-pin-cpus", "sometimes"},
		{"extra-argument"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) accepted it", args)
		}
	}
}

// TestRoundsFlag: 5 rounds by default, 3 with -quick, unless -rounds says.
func TestRoundsFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{{nil, 6}, {[]string{"-quick"}, 3}, {[]string{"-quick", "-rounds", "7"}, 7}, {[]string{"-rounds", "2"}, 2}} {
		cfg, err := parseFlags(c.args, &bytes.Buffer{}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.rounds != c.want {
			t.Errorf("parseFlags(%q): %d rounds, want %d", c.args, cfg.rounds, c.want)
		}
	}
}

// TestHelp: -help prints the usage (what the package doc says, and every
// flag) on standard output, and is not an error for main (exit 0).
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		var out, errb bytes.Buffer
		err := run(t.Context(), []string{arg}, &out, &errb)
		if err != flag.ErrHelp {
			t.Fatalf("%s: run = %v, want flag.ErrHelp (main exits 0)", arg, err)
		}
		for _, want := range []string{"Usage:", "dlockbench -url URL", "-allow-missing", "-workload", "-rounds", "bench/README.md"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: standard output lacks %q:\n%s", arg, want, out.String())
			}
		}
		if errb.Len() != 0 {
			t.Errorf("%s: wrote to standard error: %s", arg, errb.String())
		}
	}
}

// TestMissingServerFails: a server that cannot start ends the run with
// an error naming it, unless -allow-missing, which runs without it.
func TestMissingServerFails(t *testing.T) {
	t.Setenv("DLOCK_REDIS_SERVER", "/nonexistent/redis-server")
	args := []string{"-quick", "-workload", "uncontended", "-backend", "memory,redis", "-scale", "0.05", "-out"}
	var out, errb bytes.Buffer
	err := run(t.Context(), append(args, t.TempDir()), &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "redis") || !strings.Contains(err.Error(), "-allow-missing") {
		t.Fatalf("run with a server that cannot start: %v; want an error naming redis and -allow-missing", err)
	}
	out.Reset()
	errb.Reset()
	if err := run(t.Context(), append([]string{"-allow-missing"}, append(args, t.TempDir())...), &out, &errb); err != nil {
		t.Fatalf("-allow-missing: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "skipped: redis") {
		t.Errorf("-allow-missing: the table does not say redis was skipped:\n%s", out.String())
	}
}

func TestRedactArgsHidesPasswords(t *testing.T) {
	got := strings.Join(redactArgs([]string{"-url", "postgres://u:secret@h/db", "-url=mysql://u:secret@h/db"}), " ")
	if strings.Contains(got, "secret") {
		t.Fatalf("redactArgs kept the password: %s", got)
	}
}

// TestURLMode runs against a server named with -url (a real Redis from
// testenv): the dlock target, its floor, round trip and peers all run.
func TestURLMode(t *testing.T) {
	srv := testenv.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, _, out, _ := runReport(t, ctx, "-quick", "-workload", "uncontended", "-url", srv.URL)
	rows := map[string]*bench.Row{}
	for _, r := range rep.Rows {
		rows[r.Backend] = r
	}
	for _, want := range []string{"redis", "floor redis", "rtt redis", "redsync", "redislock"} {
		r := rows[want]
		if r == nil || r.Grants == 0 {
			t.Errorf("row %q missing or empty in %s", want, out)
		}
	}
	if r := rows["redis"]; r != nil && (r.FloorNs == 0 || r.BaselineRTT == 0 || r.ServerCmdsPerGrant <= 0) {
		t.Errorf("redis row lacks its baselines: floor %d ns, rtt %d ns, %v commands per grant", r.FloorNs, r.BaselineRTT, r.ServerCmdsPerGrant)
	}
}

// TestPinCPUsDefault: by default the uncontended workloads run with the
// clients and the servers dlockbench started on CPUs of their own, and
// the report says so; afterwards this process runs on every CPU again. A
// -url run has no server of its own to pin: by default it runs unpinned
// and says why; asked for on the command line, pinning that cannot be
// done fails the run.
func TestPinCPUsDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if runtime.GOOS != "linux" || runtime.NumCPU() < 2 {
		// Nothing to pin: the default run goes on unpinned, and says so.
		rep, _, _, errOut := runReport(t, ctx, "-quick", "-rounds", "1", "-scale", "0.05", "-workload", "uncontended", "-backend", "memory")
		if rep.ClientCPUs != "" || !strings.Contains(errOut, "not pinned") {
			t.Errorf("%s, %d CPUs: clients on %q; stderr %q; want unpinned, and said", runtime.GOOS, runtime.NumCPU(), rep.ClientCPUs, errOut)
		}
		return
	}
	before := cpusAllowed(t)
	rep, _, out, _ := runReport(t, ctx, "-quick", "-rounds", "1", "-scale", "0.05", "-workload", "uncontended", "-backend", "redis", "-no-peers")
	if rep.ClientCPUs == "" || rep.ServerCPUs == "" || rep.PinnedWorkloads != "uncontended" {
		t.Errorf("report: clients on %q, servers on %q, pinned %q; want both sets and \"uncontended\"", rep.ClientCPUs, rep.ServerCPUs, rep.PinnedWorkloads)
	}
	if !strings.Contains(out, "-pin-cpus uncontended") {
		t.Errorf("the header does not say the run was pinned:\n%s", out)
	}
	if after := cpusAllowed(t); after != before {
		t.Errorf("after the run this process runs on CPUs %s, before on %s", after, before)
	}

	srv := testenv.Redis(t)
	rep, _, _, errOut := runReport(t, ctx, "-quick", "-rounds", "1", "-scale", "0.05", "-workload", "uncontended", "-no-peers", "-url", srv.URL)
	if rep.ClientCPUs != "" || !strings.Contains(errOut, "not pinned") {
		t.Errorf("-url run: clients on %q; stderr %q; want unpinned, and said", rep.ClientCPUs, errOut)
	}
	var o, e bytes.Buffer
	err := run(ctx, []string{"-quick", "-rounds", "1", "-scale", "0.05", "-workload", "uncontended", "-no-peers", "-pin-cpus", "all", "-url", srv.URL, "-out", t.TempDir()}, &o, &e)
	if err == nil || !strings.Contains(err.Error(), "-pin-cpus") {
		t.Errorf("-pin-cpus all with -url: %v; want an error naming -pin-cpus", err)
	}
}

// cpusAllowed is the kernel's list of the CPUs this process may run on.
func cpusAllowed(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no Cpus_allowed_list")
	return ""
}

// TestHandoffPacedReferences runs the handoff workload against a real
// Redis (-url): every round measures, once per hold, the paced references
// the rows' ideal needs, report.json carries them apart from the rows (no
// row of a floor or round trip in the handoff), and the dlock row's ideal
// is built from them round by round.
func TestHandoffPacedReferences(t *testing.T) {
	srv := testenv.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, _, _, _ := runReport(t, ctx, "-quick", "-rounds", "2", "-scale", "0.2", "-workload", "handoff", "-url", srv.URL)
	labels := map[string]bool{}
	for _, r := range rep.Rows {
		labels[r.Label] = true
		if r.Kind != bench.KindDlock && r.Kind != bench.KindPeer {
			t.Errorf("row %s (%s) in %q: the references are not rows", r.Backend, r.Kind, r.Label)
		}
		if r.Backend == "redis" && r.Skipped == "" && (r.Ideal == nil || r.IdealGap == nil || r.IdealGap.Rounds != 2) {
			t.Errorf("redis on %q: ideal %+v, gap %+v; want both from the 2 rounds' paced references", r.Label, r.Ideal, r.IdealGap)
		}
	}
	if len(labels) != 4 {
		t.Fatalf("configurations %v; want -quick's 4 handoff configurations", labels)
	}
	got := map[string][]time.Duration{}
	for _, p := range rep.Paced {
		if p.LastError != "" || len(p.Rounds) != 2 {
			t.Errorf("paced %s: %+v; want 2 rounds", p.Backend, p)
		}
		got[p.Backend] = append(got[p.Backend], time.Duration(p.HoldNs))
	}
	for _, ref := range []string{"floor redis", "floor redis unfenced", "rtt redis"} {
		if slices.Sort(got[ref]); !slices.Equal(got[ref], []time.Duration{0, time.Millisecond}) {
			t.Errorf("%s paced by %v; want once by each hold of the run, 0s and 1ms", ref, got[ref])
		}
	}
}

// runReport runs dlockbench with args into a temporary report directory
// and returns the report.json it wrote, read back, the directory, and
// its standard output and standard error.
func runReport(t *testing.T, ctx context.Context, args ...string) (rep *bench.Report, dir, stdout, stderr string) {
	t.Helper()
	dir = t.TempDir()
	var out, errb bytes.Buffer
	if err := run(ctx, append(args, "-out", dir), &out, &errb); err != nil {
		t.Fatalf("dlockbench: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	rep = &bench.Report{}
	if err := json.Unmarshal(b, rep); err != nil {
		t.Fatal(err)
	}
	return rep, dir, out.String(), errb.String()
}
