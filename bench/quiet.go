package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Settling before a timed slice.
//
// dlockbench runs every server of a run at once and lets their targets
// take turns, so that a burst of load lands on all of them alike. But a
// server keeps working after its own slice has ended: PostgreSQL's WAL
// writer, checkpointer and autovacuum after a burst of UPDATEs, MariaDB's
// purge and page flushing, ZooKeeper's snapshots, etcd's compaction and
// bbolt commits. On two cores and one disk that CPU and those fsyncs land
// on whichever target runs next, so a slice measures the aftermath of the
// previous target on another server as well as its own (etcd's handoff
// slices stalled for 20–150 ms behind another server's writes).
//
// Quiet.Settle (dlockbench -settle), called before each timed slice of
// the contended workloads (Runner.Run, the Pacer's references, RunSemaphore's slices,
// each scale point), waits until every server of the run but the one the
// slice measures has been quiet for a window: over SettleWindow none of
// them (every thread of every process that descends from the server's
// PID: PostgreSQL's backends and workers too; a multi-node server's
// nodes together) ran for more than settleMaxCPU of one core (per-thread
// run time in nanoseconds from /proc/<pid>/task/<tid>/schedstat:
// /proc/<pid>/stat counts 10 ms ticks, too coarse for a 30 ms window) or
// caused a write to storage (/proc/<pid>/io write_bytes), and no write
// of any process is in flight on the machine's disks at the window's end
// (/sys/block/<disk>/inflight: a flush in flight delays the next fsync).
// It waits at most SettleMaxWait per slice, and once the run has spent
// SettleBudget in all it stops waiting (a machine that is never quiet
// cannot stall the run); it says which server was busy when it gave up.
// Every target's slice is settled alike (dlock's, its peers', the
// semaphore floor's and the paced references'), so ratios stay paired.
// The uncontended workload's 2 ms turns are not settled: a pause before
// each turn made its intervals wider. Settling is not on by default: the
// other servers' aftermath measured small beside the machine's own CPU
// pressure, and the intervals it narrowed it narrowed little
// (bench/README.md, Settling).
//
// Watch records, per slice, what the other servers did during it, the
// server under test's own run time, and the machine's CPU and I/O
// pressure stalls: the evidence of what a slow slice met.

// Settle limits: a window of 30 ms holds two or three of a busy server's
// background wake-ups (PostgreSQL's WAL writer sleeps 200 ms, etcd's
// bbolt commits every 100 ms), so one that is still working shows; a
// slice waits at most a second; a run at most two minutes in all.
const (
	SettleWindow  = 30 * time.Millisecond
	SettleMaxWait = time.Second
	SettleBudget  = 2 * time.Minute
	// settleMaxCPU is the share of one core the servers not under test
	// may use in a quiet window: their idle housekeeping (Redis's cron at
	// 10 Hz, ZooKeeper's session ticks) stays below it.
	settleMaxCPU = 0.05
)

// SettleWait is what the settles before a slice (or a round's slices)
// did.
type SettleWait struct {
	// WaitNs is how long they waited (at least one window each).
	WaitNs int64 `json:"wait_ns"`
	// Settles counts them, TimedOut those that gave up: the servers were
	// not quiet within SettleMaxWait, or the run's SettleBudget was
	// spent. Busy says what was busy when the last one gave up.
	Settles  int    `json:"settles"`
	TimedOut int    `json:"timed_out"`
	Busy     string `json:"busy,omitempty"`
}

// add adds o's settles to w's.
func (w *SettleWait) add(o SettleWait) {
	w.WaitNs += o.WaitNs
	w.Settles += o.Settles
	w.TimedOut += o.TimedOut
	if o.Busy != "" {
		w.Busy = o.Busy
	}
}

// Quiet waits for a run's servers to be quiet (see Settle). A nil *Quiet
// never waits. Safe for concurrent use, though one settle at a time is
// what a run does.
type Quiet struct {
	// wait: Settle waits (else it returns at once and only Watch reads).
	wait                    bool
	window, maxWait, budget time.Duration
	servers                 []*quietServer
	disks                   func() (inFlight uint64, err error)

	mu    sync.Mutex
	spent time.Duration
	n     int // settles
	outs  int // settles that timed out
}

// quietServer is one server's process tree and its threads' last
// readings.
type quietServer struct {
	id   string
	root int
	tree cachedTree
	run  map[int]int64 // tid → run time (ns) at the last reading
	wr   map[int]int64 // pid → write_bytes at the last reading
}

// NewQuiet returns a Quiet over the servers with a known PID (their
// nodes for a multi-node server, all under the server's ID); nil when
// none has one, or when /proc has no per-thread run times. Without wait,
// its Settle does not wait: its Watch still says what the other servers
// did during each slice.
func NewQuiet(servers []*Server, wait bool) *Quiet {
	if !hasSchedstat() {
		return nil
	}
	q := &Quiet{wait: wait, window: SettleWindow, maxWait: SettleMaxWait, budget: SettleBudget, disks: disksInFlight}
	var add func(id string, s *Server)
	add = func(id string, s *Server) {
		if s.PID > 0 {
			q.servers = append(q.servers, &quietServer{id: id, root: s.PID})
		}
		for _, n := range s.Nodes {
			add(id, n)
		}
	}
	for _, s := range servers {
		add(s.ID, s)
	}
	if len(q.servers) == 0 {
		return nil
	}
	return q
}

// hasSchedstat reports whether the kernel keeps per-thread run times
// (CONFIG_SCHED_INFO).
var hasSchedstat = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/schedstat")
	return err == nil
})

// Settle waits until every server but except (a Server.ID; "" for none)
// has been quiet for a window, or SettleMaxWait has passed, or the run's
// budget is spent, or ctx ends; it returns how long it waited and
// whether it gave up.
func (q *Quiet) Settle(ctx context.Context, except string) SettleWait {
	if q == nil || !q.wait {
		return SettleWait{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	start := time.Now()
	out := SettleWait{Settles: 1}
	if q.spent >= q.budget {
		out.Busy = "the run's settle budget is spent"
	} else {
		out.Busy = q.settle(ctx, except, min(q.maxWait, q.budget-q.spent))
	}
	if out.Busy != "" {
		out.TimedOut = 1
		q.outs++
	}
	out.WaitNs = int64(time.Since(start))
	q.spent += time.Since(start)
	q.n++
	return out
}

// settle waits; it returns "" once the servers were quiet, else what was
// busy when it gave up.
func (q *Quiet) settle(ctx context.Context, except string, limit time.Duration) string {
	watched := q.others(except)
	start := time.Now()
	prev := q.read(watched)
	for {
		t := time.NewTimer(q.window)
		select {
		case <-ctx.Done():
			t.Stop()
			return "interrupted"
		case <-t.C:
		}
		cur := q.read(watched)
		busy := quietVerdict(prev, cur, q.window)
		if busy == "" || time.Since(start)+q.window > limit {
			return busy
		}
		prev = cur
	}
}

// others returns the servers but except.
func (q *Quiet) others(except string) []*quietServer {
	var out []*quietServer
	for _, s := range q.servers {
		if s.id != except {
			out = append(out, s)
		}
	}
	return out
}

// Stats returns how many settles ran, how many timed out, and the time
// they took in all.
func (q *Quiet) Stats() (settles, timedOut int, spent time.Duration) {
	if q == nil {
		return 0, 0, 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, q.outs, q.spent
}

// quietReading is one reading of the watched servers: each one's run
// time and storage writes since the previous reading (a thread or
// process first seen counts nothing), and the disks' writes in flight.
type quietReading struct {
	at       time.Time
	servers  []serverReading // in the order of the Quiet's servers
	inFlight uint64
	diskErr  error
}

// serverReading is one server's run time and storage writes since the
// previous reading (a multi-node server's nodes are one each).
type serverReading struct {
	id             string
	runNs, written int64
}

func (q *Quiet) read(servers []*quietServer) quietReading {
	r := quietReading{at: time.Now()}
	for _, s := range servers {
		run, wr := s.read()
		if n := len(r.servers); n > 0 && r.servers[n-1].id == s.id {
			// Another node of the same server (NewQuiet adds them in a row).
			r.servers[n-1].runNs += run
			r.servers[n-1].written += wr
			continue
		}
		r.servers = append(r.servers, serverReading{s.id, run, wr})
	}
	r.inFlight, r.diskErr = q.disks()
	return r
}

// read returns the server's run time and storage writes since its last
// reading.
func (s *quietServer) read() (runNs, written int64) {
	pids, _, err := s.tree.members(s.root)
	if err != nil {
		return 0, 0
	}
	run, wr := map[int]int64{}, map[int]int64{}
	for _, p := range pids {
		dir := "/proc/" + strconv.Itoa(p)
		if w, ok := readFigure(dir+"/io", parseWriteBytes); ok {
			wr[p] = w
			if old, seen := s.wr[p]; seen && w > old {
				written += w - old
			}
		}
		tasks, err := os.ReadDir(dir + "/task")
		if err != nil {
			continue // ended
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			ns, ok := readFigure(dir+"/task/"+t.Name()+"/schedstat", parseSchedstat)
			if !ok {
				continue
			}
			run[tid] = ns
			if old, seen := s.run[tid]; seen && ns > old {
				runNs += ns - old
			}
		}
	}
	s.run, s.wr = run, wr
	return runNs, written
}

// quietVerdict returns "" when the servers were quiet between two
// readings a window apart, else what was busy: a server (all its nodes
// and processes together) that ran for more than settleMaxCPU of the
// window or wrote to storage, or the disks' writes in flight at the
// second reading.
func quietVerdict(prev, cur quietReading, window time.Duration) string {
	span := cur.at.Sub(prev.at)
	if span <= 0 {
		span = window
	}
	limit := int64(float64(span) * settleMaxCPU)
	for _, r := range cur.servers {
		if r.runNs > limit {
			return fmt.Sprintf("%s ran %v in %v", r.id, time.Duration(r.runNs).Round(10*time.Microsecond), span.Round(time.Millisecond))
		}
		if r.written > 0 {
			return fmt.Sprintf("%s wrote %d bytes", r.id, r.written)
		}
	}
	if cur.diskErr == nil && cur.inFlight > 0 {
		return fmt.Sprintf("%d disk writes in flight", cur.inFlight)
	}
	return ""
}

// readFigure reads a /proc or /sys file and parses a figure from it.
func readFigure(path string, parse func(string) (int64, bool)) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parse(string(b))
}

// parseSchedstat returns the first field of a schedstat file: the time
// the thread has run, in nanoseconds.
func parseSchedstat(s string) (int64, bool) {
	f := strings.Fields(s)
	if len(f) < 1 {
		return 0, false
	}
	v, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// parseWriteBytes returns write_bytes of a /proc/<pid>/io file: the
// bytes the process caused to be sent to storage.
func parseWriteBytes(s string) (int64, bool) {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// disksInFlight returns the writes in flight on the machine's storage
// disks, from /sys/block/<disk>/inflight (reads, then writes).
func disksInFlight() (uint64, error) {
	entries, err := os.ReadDir("/sys/block")
	if err != nil {
		return 0, err
	}
	var total uint64
	for _, e := range entries {
		if !storageDisk(e.Name()) {
			continue
		}
		b, err := os.ReadFile("/sys/block/" + e.Name() + "/inflight")
		if err != nil {
			continue
		}
		if w, ok := parseInflight(string(b)); ok {
			total += w
		}
	}
	return total, nil
}

// parseInflight returns the writes of an inflight file ("reads writes").
func parseInflight(s string) (uint64, bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, false
	}
	w, err := strconv.ParseUint(f[1], 10, 64)
	return w, err == nil
}

// storageDisk reports whether a /sys/block device is storage, not a
// loop, RAM, zram or device-mapper device (a device-mapper disk's writes
// are its backing disk's as well).
func storageDisk(name string) bool {
	for _, virt := range []string{"loop", "ram", "zram", "dm-", "md", "nbd"} {
		if strings.HasPrefix(name, virt) {
			return false
		}
	}
	return true
}

// Background is what the servers not under test did while a slice ran:
// the evidence that Settle is about (a slow slice beside a busy server),
// beside the other causes a slow slice could have: the server under
// test's own work, and the whole machine's CPU and I/O pressure (other
// processes than the benchmark's).
type Background struct {
	// CPUNs is the other servers' run time, WrittenBytes their writes to
	// storage.
	CPUNs        int64 `json:"cpu_ns"`
	WrittenBytes int64 `json:"written_bytes"`
	// OwnCPUNs is the run time of the server under test (its work for the
	// slice and any of its own background).
	OwnCPUNs int64 `json:"own_cpu_ns"`
	// CPUStallNs and IOStallNs are the machine's pressure stall times
	// (/proc/pressure/cpu and io, "some"): how long at least one task
	// waited for a CPU, or for I/O (0 where the kernel has no PSI).
	CPUStallNs int64 `json:"cpu_stall_ns"`
	IOStallNs  int64 `json:"io_stall_ns"`
}

// Watch starts reading what the servers but except do; the function it
// returns reads again and returns what they did in between. A nil
// *Quiet watches nothing.
func (q *Quiet) Watch(except string) func() Background {
	if q == nil {
		return func() Background { return Background{} }
	}
	q.mu.Lock()
	for _, s := range q.servers {
		s.read()
	}
	cpu0, io0 := pressure("cpu"), pressure("io")
	q.mu.Unlock()
	return func() Background {
		q.mu.Lock()
		defer q.mu.Unlock()
		var b Background
		for _, s := range q.servers {
			run, wr := s.read()
			if s.id == except {
				b.OwnCPUNs += run
				continue
			}
			b.CPUNs += run
			b.WrittenBytes += wr
		}
		if cpu1, io1 := pressure("cpu"), pressure("io"); cpu0 > 0 && io0 > 0 {
			b.CPUStallNs, b.IOStallNs = (cpu1-cpu0)*1000, (io1-io0)*1000
		}
		return b
	}
}

// pressure returns the "some" total (µs) of /proc/pressure/<what>, 0
// when the kernel has none.
func pressure(what string) int64 {
	v, _ := readFigure("/proc/pressure/"+what, parsePressure)
	return v
}

func parsePressure(s string) (int64, bool) {
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// RoundSettle is one round's settling, beside the round's figures.
type RoundSettle struct {
	Round int `json:"round"`
	SettleWait
	// Background is what the other servers did during the round's slice
	// (contended workloads).
	Background   *Background `json:"background,omitempty"`
	GrantsPerSec float64     `json:"grants_per_sec"`
	UseNs        float64     `json:"use_ns"`
}

// settleRounds returns the sum of the rounds' settles (nil when none
// settled) and the rounds' settling (nil when none settled or watched).
func settleRounds(figs []RoundFigures) (*SettleWait, []RoundSettle) {
	var sum SettleWait
	var rounds []RoundSettle
	for _, f := range figs {
		if f.Settle.Settles == 0 && f.Background == nil {
			continue
		}
		sum.add(f.Settle)
		rounds = append(rounds, RoundSettle{Round: f.Round, SettleWait: f.Settle, Background: f.Background,
			GrantsPerSec: f.GrantsPerSec, UseNs: f.UseNs})
	}
	if rounds == nil {
		return nil, nil
	}
	if sum.Settles == 0 {
		return nil, rounds // watched only
	}
	return &sum, rounds
}

// SettleSummary is a run's settling, for its report.
type SettleSummary struct {
	// Waited: the run settled (dlockbench -settle); else it only watched.
	Waited   bool          `json:"waited"`
	WindowNs time.Duration `json:"window_ns"`
	MaxWait  time.Duration `json:"max_wait_ns"`
	Budget   time.Duration `json:"budget_ns"`
	MaxCPU   float64       `json:"max_cpu_share"`
	Settles  int           `json:"settles"`
	TimedOut int           `json:"timed_out"`
	// SpentNs is the time the settles took in all.
	SpentNs time.Duration `json:"spent_ns"`
}

// Summary returns the run's settling so far (nil for a nil Quiet).
func (q *Quiet) Summary() *SettleSummary {
	if q == nil {
		return nil
	}
	n, outs, spent := q.Stats()
	return &SettleSummary{Waited: q.wait, WindowNs: q.window, MaxWait: q.maxWait, Budget: q.budget, MaxCPU: settleMaxCPU,
		Settles: n, TimedOut: outs, SpentNs: spent}
}

// settleOften is the share of a run's settles that may time out before
// the report's caveats say that the servers were seldom quiet.
const settleOften = 0.10

// caveat returns the report's caveat about the settling, or "".
func (s *SettleSummary) caveat() string {
	if s == nil || !s.Waited || s.Settles == 0 || float64(s.TimedOut) <= settleOften*float64(s.Settles) {
		return ""
	}
	return fmt.Sprintf("the servers not under test were seldom quiet before a slice: %d of %d settles gave up (after %v each, or once the run's %v were spent), so those slices ran beside another server's background work",
		s.TimedOut, s.Settles, s.MaxWait, s.Budget)
}
