package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
	_ "github.com/dlock-go/dlock/memory"
	_ "github.com/dlock-go/dlock/postgres"
	_ "github.com/dlock-go/dlock/redis"
)

func TestMain(m *testing.M) {
	registerTestOpeners()
	if d, err := time.ParseDuration(os.Getenv("DLOCKBENCH_TEST_STOP_GRACE")); err == nil {
		stopGrace = d // for the child processes of TestRunProcsReportsStuckClients
	}
	ChildMain() // the -procs tests re-execute this binary as client parts
	os.Exit(testenv.Run(m))
}

// unsafeLock is a deliberately broken lock: every Acquire succeeds at
// once and tokens repeat, so the checker must report violations.
type unsafeLock struct{}

func (unsafeLock) Acquire(ctx context.Context, name string) (Held, error) { return unsafeHeld{}, nil }
func (unsafeLock) FailedAttempts() uint64                                 { return 0 }
func (unsafeLock) Close() error                                           { return nil }
func (unsafeLock) Fencing() bool                                          { return true }

type unsafeHeld struct{}

func (unsafeHeld) Token() uint64                     { return 7 }
func (unsafeHeld) Release(ctx context.Context) error { return nil }

// registerTestOpeners adds the test-only implementations to openers;
// TestMain calls it first, as the -procs tests' child processes (this
// binary, re-executed) need them too.
func registerTestOpeners() {
	openers["test-unsafe"] = func(ctx context.Context, t Target) (Client, error) { return unsafeLock{}, nil }
	seen := new(sync.Map) // the names stuckLock granted, in this process
	openers["test-stuck"] = func(ctx context.Context, t Target) (Client, error) { return stuckLock{seen: seen}, nil }
	openers["test-stuck-warming"] = func(ctx context.Context, t Target) (Client, error) { return stuckWarmingLock{}, nil }
	openers["test-count"] = func(ctx context.Context, t Target) (Client, error) { return countingLock{}, nil }
}

// countingLock is unsafeLock counting the acquires of every name.
type countingLock struct{ unsafeLock }

var acquires sync.Map // name → *atomic.Int64

func (countingLock) Acquire(ctx context.Context, name string) (Held, error) {
	n, _ := acquires.LoadOrStore(name, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	return unsafeHeld{}, nil
}

// acquiresOf returns the acquires of each name with the prefix of names
// (not the warm-up names), and their total.
func acquiresOf(prefix string) (map[string]int64, int64) {
	out, total := map[string]int64{}, int64(0)
	acquires.Range(func(k, v any) bool {
		if strings.HasPrefix(k.(string), prefix) && strings.Contains(k.(string), "-k") {
			out[k.(string)] = v.(*atomic.Int64).Load()
			total += out[k.(string)]
		}
		return true
	})
	return out, total
}

var unsafeTarget = Target{Name: "unsafe", Kind: KindPeer, Impl: "test-unsafe", Backend: "test"}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestCheckerCountsOverlapsAndStaleTokens(t *testing.T) {
	c := NewChecker(2)
	c.Enter(0, 5, true, Now(), Now())
	c.Enter(0, 5, true, Now(), Now()) // a second holder, same token
	ex, fe := c.Violations()
	if ex != 1 || fe != 1 {
		t.Fatalf("violations = %d exclusion, %d fencing; want 1, 1", ex, fe)
	}
	c.Exit(0)
	c.Exit(0)
	start := Now()
	c.Enter(1, 1, true, start, Now())
	c.Exit(1)
	if ho := c.Enter(1, 2, true, start, Now()+1000); ho < 1000 {
		t.Fatalf("handoff = %d for a waiter that started before the release; want ≥ 1000", ho)
	}
	c.Exit(1)
	if ho := c.Enter(1, 3, true, Now(), Now()); ho != -1 {
		t.Fatalf("handoff = %d for an acquirer that came after the release; want -1", ho)
	}
	if ex, fe := c.Violations(); ex != 1 || fe != 1 {
		t.Fatalf("violations changed to %d, %d by correct use", ex, fe)
	}
}

func TestSharedCheckerSeesOtherMappings(t *testing.T) {
	a, err := NewSharedChecker(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(true)
	b, err := OpenChecker(a.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(false)
	a.Enter(2, 1, false, Now(), Now())
	b.Enter(2, 1, false, Now(), Now())
	if ex, _ := a.Violations(); ex != 1 {
		t.Fatalf("exclusion violations through two mappings = %d, want 1", ex)
	}
}

func TestJainAndIdeal(t *testing.T) {
	if j := jain([]uint64{3, 3, 3, 3}); j != 1 {
		t.Errorf("jain(equal) = %v, want 1", j)
	}
	if j := jain([]uint64{4, 0, 0, 0}); j != 0.25 {
		t.Errorf("jain(one of four) = %v, want 0.25", j)
	}
	// Lock-bound: 1/(1ms+1ms) = 500/s; demand-bound: 2/(1ms+10ms+1ms) ≈ 166.7/s.
	if got := Ideal(time.Millisecond, 0, time.Millisecond, 32); got != 500 {
		t.Errorf("Ideal lock-bound = %v, want 500", got)
	}
	if got := Ideal(time.Millisecond, 10*time.Millisecond, time.Millisecond, 2); got < 166 || got > 167 {
		t.Errorf("Ideal demand-bound = %v, want ≈166.7", got)
	}
}

func TestSumCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_set:calls=10,usec=5,usec_per_call=0.5\r\n" +
		"cmdstat_evalsha:calls=7,usec=9\r\ncmdstat_info:calls=99,usec=1\r\ncmdstat_ssubscribe:calls=2,usec=1\r\n"
	if n, r := sumCommandStats(info); n != 19 || r != 9 {
		t.Fatalf("sumCommandStats = %d commands, %d requests; want 19 (INFO excluded), 9 (EVALSHA and SSUBSCRIBE)", n, r)
	}
}

func TestServerURLStripsDriverParameters(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@127.0.0.1:5/db?sslmode=disable&strategy=advisory": "postgres://u:p@127.0.0.1:5/db?sslmode=disable",
		"redis://127.0.0.1:6/0?prefix=x":                                  "redis://127.0.0.1:6/0",
		"zk://127.0.0.1:2181/locks?recipe=basic":                          "zk://127.0.0.1:2181",
	} {
		if got := ServerURL(in); got != want {
			t.Errorf("ServerURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRunFindsViolationsOfABrokenLock proves the checker on a lock that
// does not exclude: a run must report violations.
func TestRunFindsViolationsOfABrokenLock(t *testing.T) {
	w := Workload{Kind: Handoff, Clients: 4, Names: 1, Hold: time.Millisecond, Duration: 100 * time.Millisecond}
	res, err := (&Runner{}).Run(ctxT(t, time.Minute), unsafeTarget, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Exclusion == 0 || res.Fencing == 0 {
		t.Fatalf("broken lock: %d exclusion and %d fencing violations; want both > 0", res.Exclusion, res.Fencing)
	}
}

// TestRunProcsSharesTheChecker runs the broken lock in two client
// processes, one client each: only a checker shared across processes can
// see their overlaps.
func TestRunProcsSharesTheChecker(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := Workload{Kind: Handoff, Clients: 2, Names: 1, Hold: 2 * time.Millisecond, Duration: 200 * time.Millisecond}
	r := &Runner{Procs: 2, Exe: exe, Stderr: os.Stderr}
	res, err := r.Run(ctxT(t, time.Minute), unsafeTarget, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Procs != 2 || len(res.Grants) != 2 {
		t.Fatalf("ran in %d processes with %d clients; want 2 and 2", res.Procs, len(res.Grants))
	}
	if res.Exclusion == 0 {
		t.Fatal("two processes holding one name at once were not seen")
	}
}

// memReport measures mem:// on every workload, briefly, and returns the
// report (real data for the report tests).
func memReport(t *testing.T) *Report {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	r := &Runner{}
	mem := MemoryTarget()
	var rows []*Row
	capacity := 0.0
	for _, w := range Plan(PlanOptions{Quick: true, Scale: 0.25}) {
		if w.Kind == OpenLoop {
			w.Rate = w.Load * capacity
		}
		res, err := r.Run(ctx, mem, w, nil)
		if err != nil {
			t.Fatalf("%s: %v", w.Label(), err)
		}
		row := NewRow(res)
		if w.Kind == ManyKeys && capacity == 0 {
			capacity = row.GrantsPerSec
		}
		if row.Grants == 0 || row.Violations != 0 || row.FencingViolations != 0 {
			t.Fatalf("%s: %d grants, %d/%d violations", w.Label(), row.Grants, row.Violations, row.FencingViolations)
		}
		rows = append(rows, row)
	}
	Finalize(rows, []Target{mem}, nil)
	return &Report{Started: time.Now(), GoVersion: "test", Rows: rows, Peers: PeerNotes,
		Servers: []*Server{{ID: "memory", Backend: "memory", Origin: "test", Settings: map[string]string{"none": "in-process"}}}}
}

func TestReportFiles(t *testing.T) {
	rep := memReport(t)
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	rows := decodeRows(t, b, len(rep.Rows))
	for _, f := range []string{"backend", "workload", "params", "p50_ns", "p99_ns", "p999_ns", "grants_per_sec",
		"ideal_grants_per_sec", "baseline_rtt_ns", "floor_ns", "ratio_to_floor", "handoff_p50_ns", "jain",
		"max_wait_ns", "violations"} {
		if _, ok := rows[0][f]; !ok {
			t.Errorf("report.json rows lack field %q", f)
		}
	}
	csvb, err := os.ReadFile(filepath.Join(dir, "report.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csvb), "\n"); lines != len(rep.Rows)+1 {
		t.Errorf("report.csv has %d lines, want %d", lines, len(rep.Rows)+1)
	}
	html, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(html)
	if strings.Contains(page, "<script src") || strings.Contains(page, "<link href") {
		t.Error("index.html loads an external script or stylesheet; it must be self-contained")
	}
	if !strings.Contains(page, "<svg") {
		t.Error("index.html lacks its inline SVG charts")
	}
	var table strings.Builder
	rep.WriteTable(&table)
	for _, want := range []string{"== uncontended", "== handoff w=8 hold=1ms", "== openloop 50%", "memory"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

func TestProcessTreeCPU(t *testing.T) {
	// Burn some CPU, then read our own process's time.
	var x atomic.Uint64
	for i := range 20_000_000 {
		x.Add(uint64(i))
	}
	cpu, err := ProcessTreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if cpu <= 0 {
		t.Fatalf("CPU time of a busy process = %v, want > 0", cpu)
	}
}

// TestRunProcsOnRedis runs dlock's Redis driver with clients in two
// processes: the one case where only separate processes are honest.
func TestRunProcsOnRedis(t *testing.T) {
	srv := testenv.Redis(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{ID: "redis", Backend: "redis", URL: srv.URL}
	targets, _ := TargetsFor(s)
	var dl Target
	for _, tg := range targets {
		if tg.Kind == KindDlock {
			dl = tg
		}
	}
	if dl.Name == "" {
		t.Fatal("no dlock target for a Redis server")
	}
	w := Workload{Kind: Handoff, Clients: 4, Names: 1, Hold: time.Millisecond, Work: time.Millisecond, Duration: 300 * time.Millisecond}
	r := &Runner{Procs: 2, Exe: exe, Stderr: os.Stderr}
	res, err := r.Run(ctxT(t, time.Minute), dl, w, s.Sample)
	if err != nil {
		t.Fatal(err)
	}
	row := NewRow(res)
	if row.Procs != 2 || row.Grants == 0 || row.Violations != 0 || row.FencingViolations != 0 {
		t.Fatalf("procs=%d grants=%d violations=%d/%d errors=%d (%s)", row.Procs, row.Grants,
			row.Violations, row.FencingViolations, row.Errors, row.LastError)
	}
	if row.ServerCmdsPerGrant <= 0 {
		t.Errorf("server commands per grant = %v, want > 0 from INFO commandstats", row.ServerCmdsPerGrant)
	}
}

func TestTargetsForListsFloorsRTTAndPeers(t *testing.T) {
	s := &Server{ID: "redis", Backend: "redis", URL: "redis://127.0.0.1:1/0"}
	ts, skipped := TargetsFor(s)
	byName := map[string]Target{}
	for _, tg := range ts {
		byName[tg.Name] = tg
	}
	for _, want := range []string{"redis", "floor redis", "floor redis unfenced", "rtt redis",
		"redsync", "redsync tuned", "redislock", "redislock tuned"} {
		if _, ok := byName[want]; !ok {
			t.Errorf("TargetsFor(redis) lacks %q (have %v, skipped %v)", want, ts, skipped)
		}
	}
	if got := byName["redis"].Floor; got != "floor redis" {
		t.Errorf("redis is compared with floor %q, want %q", got, "floor redis")
	}
	if got := byName["redsync"].RTT; got != "rtt redis" {
		t.Errorf("redsync's round trip is %q, want %q", got, "rtt redis")
	}

	// A driver that is not built in is reported, with its floors still measured.
	pg := &Server{ID: "postgres", Backend: "postgres", URL: "postgres://u:p@127.0.0.1:1/db?sslmode=disable"}
	ts, skipped = TargetsFor(pg)
	floors := 0
	for _, tg := range ts {
		if tg.Kind == KindFloor {
			floors++
		}
		if strings.Contains(tg.URL, "strategy=") && tg.Kind != KindDlock {
			t.Errorf("%s got a driver URL %s", tg.Name, tg.URL)
		}
	}
	if floors != 3 {
		t.Errorf("postgres has %d floors, want 3 (forupdate, version, advisory)", floors)
	}
	if !Registered(pg.URL) && len(skipped) != 3 {
		t.Errorf("postgres driver missing: skipped = %v, want its 3 strategies", skipped)
	}
}

func TestReportsNeverHoldPasswords(t *testing.T) {
	tg := Target{Name: "postgres/advisory", Kind: KindDlock, URL: "postgres://dlock:s3cret@127.0.0.1:1/db?strategy=advisory", Backend: "postgres"}
	rep := &Report{Rows: []*Row{SkippedRow(tg, Plan(PlanOptions{Kinds: []string{Uncontended}})[0], "not measured")},
		Servers: []*Server{{ID: "postgres", Backend: "postgres", URL: tg.URL, Settings: map[string]string{}}}}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.json", "report.csv", "index.html"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "s3cret") {
			t.Errorf("%s holds the password", f)
		}
	}
}

// stuckLock grants its warm-up names, and each other name once (the
// warming of every name), then blocks in Acquire ignoring both its context and Close: the
// run must end with an error, not hang.
type stuckLock struct {
	unsafeLock
	seen *sync.Map
}

func (l stuckLock) Acquire(ctx context.Context, name string) (Held, error) {
	if _, seen := l.seen.LoadOrStore(name, true); !seen || strings.Contains(name, "-w") {
		return unsafeHeld{}, nil
	}
	select {} // never returns
}

// stuckWarmingLock grants its warm-up names only: warming the workload's
// names gets stuck.
type stuckWarmingLock struct{ unsafeLock }

func (stuckWarmingLock) Acquire(ctx context.Context, name string) (Held, error) {
	if strings.Contains(name, "-w") {
		return unsafeHeld{}, nil
	}
	select {} // never returns
}

// TestRunGivesUpOnStuckWarming: clients stuck while warming the names end
// the run with ErrStuck.
func TestRunGivesUpOnStuckWarming(t *testing.T) {
	oldGrace, oldWarm := stopGrace, warmNamesTimeout
	stopGrace, warmNamesTimeout = 100*time.Millisecond, 100*time.Millisecond
	defer func() { stopGrace, warmNamesTimeout = oldGrace, oldWarm }()
	tg := Target{Name: "stuck", Kind: KindPeer, Impl: "test-stuck-warming", Backend: "test"}
	w := Workload{Kind: Handoff, Clients: 2, Names: 1, Duration: 50 * time.Millisecond}
	_, err := (&Runner{}).Run(ctxT(t, time.Minute), tg, w, nil)
	if !errors.Is(err, ErrStuck) || !strings.Contains(err.Error(), "warming") {
		t.Fatalf("Run = %v, want an error wrapping ErrStuck about warming the names", err)
	}
}

func TestRunGivesUpOnStuckClients(t *testing.T) {
	old := stopGrace
	stopGrace = 100 * time.Millisecond
	defer func() { stopGrace = old }()
	tg := Target{Name: "stuck", Kind: KindPeer, Impl: "test-stuck", Backend: "test"}
	w := Workload{Kind: Handoff, Clients: 2, Names: 1, Duration: 50 * time.Millisecond}
	_, err := (&Runner{}).Run(ctxT(t, time.Minute), tg, w, nil)
	if err == nil || !strings.Contains(err.Error(), "still in acquire") {
		t.Fatalf("Run = %v, want an error about stuck clients", err)
	}
}

// TestRunProcsReportsStuckClients: a child process whose clients get stuck
// reports it so that the parent can stop running that target.
func TestRunProcsReportsStuckClients(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tg := Target{Name: "stuck", Kind: KindPeer, Impl: "test-stuck", Backend: "test"}
	w := Workload{Kind: Handoff, Clients: 2, Names: 1, Duration: 50 * time.Millisecond}
	r := &Runner{Procs: 2, Exe: exe, Stderr: os.Stderr}
	t.Setenv("DLOCKBENCH_TEST_STOP_GRACE", "100ms")
	_, err = r.Run(ctxT(t, time.Minute), tg, w, nil)
	if !errors.Is(err, ErrStuck) {
		t.Fatalf("Run = %v, want an error wrapping ErrStuck", err)
	}
}

// TestRunWarmsEveryNameOnce: before the first measured run of a target
// on many names, its clients take and free every name once between them;
// the next runs on those names (the following rounds) do not again, and
// use the same names.
func TestRunWarmsEveryNameOnce(t *testing.T) {
	tg := Target{Name: "count", Kind: KindPeer, Impl: "test-count", Backend: "test"}
	// A measured time of 1 ns: the clients' loops make at most one
	// acquire each, so the acquires are the warming.
	w := Workload{Kind: ManyKeys, Clients: 4, Names: 50, Duration: 1}
	r := &Runner{}
	if _, err := r.Run(ctxT(t, time.Minute), tg, w, nil); err != nil {
		t.Fatal(err)
	}
	prefix := r.names[nameSet{tg.Name, w.Names}].prefix
	counts, total := acquiresOf(prefix)
	if len(counts) != w.Names || total > int64(w.Names+w.Clients) {
		t.Fatalf("first run: %d names taken, %d acquires; want all %d names, each about once", len(counts), total, w.Names)
	}
	if _, err := r.Run(ctxT(t, time.Minute), tg, w, nil); err != nil {
		t.Fatal(err)
	}
	if r.names[nameSet{tg.Name, w.Names}].prefix != prefix {
		t.Fatal("the second run of a target on the same names used other names")
	}
	if _, again := acquiresOf(prefix); again > total+int64(w.Clients) {
		t.Errorf("second run: %d more acquires; the names were warmed again", again-total)
	}

	// A hot name (fewer names than clients) is new, and warmed, in each
	// run: nothing a run's end left on it carries over.
	hot := Workload{Kind: Handoff, Clients: 4, Names: 1, Duration: 1}
	var prefixes []string
	for range 2 {
		if _, err := r.Run(ctxT(t, time.Minute), tg, hot, nil); err != nil {
			t.Fatal(err)
		}
		p := r.names[nameSet{tg.Name, hot.Names}].prefix
		if counts, _ := acquiresOf(p); counts[p+"-k0"] < 1 {
			t.Errorf("hot name %s-k0 not warmed: %v", p, counts)
		}
		prefixes = append(prefixes, p)
	}
	if prefixes[0] == prefixes[1] || prefixes[0] == prefix {
		t.Errorf("hot-name runs used prefixes %q (many-names runs: %q); want a new one per run", prefixes, prefix)
	}
}

// TestRunMeasuresHold: what each hold really took is recorded, in this
// process and across client processes.
func TestRunMeasuresHold(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := Workload{Kind: Handoff, Clients: 2, Names: 1, Hold: time.Millisecond, Duration: 100 * time.Millisecond}
	for _, r := range []*Runner{{}, {Procs: 2, Exe: exe, Stderr: os.Stderr}} {
		res, err := r.Run(ctxT(t, time.Minute), unsafeTarget, w, nil)
		if err != nil {
			t.Fatal(err)
		}
		var grants uint64
		for _, g := range res.Grants {
			grants += g
		}
		if res.Hold == nil || res.Hold.TotalCount() != int64(grants) || res.Hold.ValueAtQuantile(50) < int64(time.Millisecond) {
			t.Errorf("procs=%d: %d holds recorded for %d grants, p50 %v; want one per grant, at least the 1 ms asked",
				r.Procs, res.Hold.TotalCount(), grants, time.Duration(res.Hold.ValueAtQuantile(50)))
		}
	}
}
