package bench

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NoisyLoad is the share of the machine's CPU (in %) that other
// processes may use during a run before its figures are called noisy.
const NoisyLoad = 10

// LoadMeter measures the machine's load over a run, from Linux's /proc:
// the one-minute load average and the CPU busy share at the start and at
// the end, and how much of that CPU went to processes other than the
// benchmark's own (this process, its client processes, and the servers
// it measures with the children they spawn and reap).
type LoadMeter struct {
	roots []int
	start loadSample
	err   error
}

// loadSample is one reading of the machine's counters.
type loadSample struct {
	avg1        float64
	busy, total uint64        // CPU time of the whole machine, in ticks (all CPUs)
	ours        time.Duration // CPU time of the benchmark's process trees
}

// StartLoad takes the first reading. roots are the processes whose trees
// are the benchmark's own besides this one (the servers' PIDs; 0s are
// ignored: a server that runs elsewhere counts as another process only if
// it runs on this machine).
func StartLoad(roots ...int) *LoadMeter {
	m := &LoadMeter{roots: []int{os.Getpid()}}
	for _, r := range roots {
		if r > 0 {
			m.roots = append(m.roots, r)
		}
	}
	m.start, m.err = m.sample()
	return m
}

// Stop takes the second reading and returns the load between the two.
func (m *LoadMeter) Stop() (*Load, error) {
	if m.err != nil {
		return nil, m.err
	}
	end, err := m.sample()
	if err != nil {
		return nil, err
	}
	return loadBetween(m.start, end), nil
}

func (m *LoadMeter) sample() (loadSample, error) {
	var s loadSample
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return s, fmt.Errorf("bench: machine load: %w", err)
	}
	if s.avg1, err = parseLoadavg(string(b)); err != nil {
		return s, err
	}
	if b, err = os.ReadFile("/proc/stat"); err != nil {
		return s, fmt.Errorf("bench: machine load: %w", err)
	}
	if s.busy, s.total, err = parseCPULine(string(b)); err != nil {
		return s, err
	}
	if s.ours, err = treeCPU(m.roots...); err != nil {
		return s, err
	}
	return s, nil
}

// loadBetween turns two readings into the figures of the report.
func loadBetween(a, b loadSample) *Load {
	l := &Load{Avg1Start: a.avg1, Avg1End: b.avg1}
	if b.total <= a.total || b.busy < a.busy {
		return l
	}
	total := float64(b.total - a.total)
	busy := float64(b.busy - a.busy)
	ours := (b.ours - a.ours).Seconds() * clockTicks
	l.BusyPct = 100 * busy / total
	l.OtherPct = 100 * max(busy-ours, 0) / total
	return l
}

// parseLoadavg returns the one-minute load average of /proc/loadavg.
func parseLoadavg(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, errors.New("bench: machine load: empty /proc/loadavg")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("bench: machine load: /proc/loadavg: %w", err)
	}
	return v, nil
}

// parseCPULine returns the busy and total CPU ticks of /proc/stat's
// first line ("cpu  user nice system idle iowait irq softirq steal guest
// guest_nice"): idle and iowait are not busy; guest time is already in
// user and nice.
func parseCPULine(stat string) (busy, total uint64, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("bench: machine load: /proc/stat starts with %q, want the cpu line", line)
	}
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("bench: machine load: /proc/stat: %w", err)
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

// procTimes is a process's parent and CPU time from /proc/<pid>/stat.
type procTimes struct {
	ppid  int
	ticks uint64 // utime + stime
	child uint64 // cutime + cstime: its children that ended and were reaped
}

// readProcTimes reads /proc/<pid>/stat.
func readProcTimes(pid int) (procTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	// The command name is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("bench: bad /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("bench: short /proc/%d/stat", pid)
	}
	num := func(k int) uint64 { v, _ := strconv.ParseUint(f[k], 10, 64); return v }
	ppid, _ := strconv.Atoi(f[1])
	// Fields after the name, from 0: state ppid ... utime(11) stime(12) cutime(13) cstime(14).
	return procTimes{ppid: ppid, ticks: num(11) + num(12), child: num(13) + num(14)}, nil
}

// treeCPU returns the CPU time (user + system) of the processes roots
// and all their descendants, each counted once, with the children each
// of them has reaped (a PostgreSQL server's ended connections, this
// program's ended client processes). It fails only when no root can be
// read.
func treeCPU(roots ...int) (time.Duration, error) {
	procs, err := listTree(roots)
	if err != nil {
		return 0, err
	}
	return sumTicks(procs), nil
}

// listTree reads roots and every process descending from them. It walks
// the kernel's children lists (/proc/<pid>/task/<tid>/children), so its
// cost is the tree's, not the machine's: a scan of all of /proc, which it
// falls back to where the kernel keeps no such lists, cost milliseconds
// and most of dlockbench's own CPU on a busy machine, around the very
// slices it measured.
func listTree(roots []int) (map[int]procTimes, error) {
	procs := map[int]procTimes{}
	var firstErr error
	for _, r := range roots {
		pt, err := readProcTimes(r)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		procs[r] = pt
	}
	if len(procs) == 0 {
		if firstErr == nil {
			firstErr = errors.New("bench: no process to measure")
		}
		return nil, firstErr
	}
	if !hasChildrenLists() {
		return scanTree(procs), nil
	}
	queue := slices.Collect(maps.Keys(procs))
	for len(queue) > 0 {
		p := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, k := range childrenOf(p) {
			if _, seen := procs[k]; seen {
				continue
			}
			if pt, err := readProcTimes(k); err == nil {
				procs[k] = pt
				queue = append(queue, k)
			}
		}
	}
	return procs, nil
}

// hasChildrenLists reports whether the kernel keeps children lists
// (CONFIG_PROC_CHILDREN).
var hasChildrenLists = sync.OnceValue(func() bool {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil || len(tasks) == 0 {
		return false
	}
	_, err = os.Stat("/proc/self/task/" + tasks[0].Name() + "/children")
	return err == nil
})

// childrenOf returns the children of every thread of pid (none once it
// has ended).
func childrenOf(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/children")
		if err != nil {
			continue // the thread ended
		}
		for _, f := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(f); err == nil {
				out = append(out, k)
			}
		}
	}
	return out
}

// scanTree adds to procs (the roots) every process descending from them,
// found by a scan of all of /proc.
func scanTree(procs map[int]procTimes) map[int]procTimes {
	isRoot := map[int]bool{}
	for r := range procs {
		isRoot[r] = true
	}
	all := map[int]procTimes{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || isRoot[p] {
			continue
		}
		if pt, err := readProcTimes(p); err == nil {
			all[p] = pt
		}
	}
	ours := func(p int) bool {
		for range 64 {
			if isRoot[p] {
				return true
			}
			pt, ok := all[p]
			if !ok {
				return false
			}
			p = pt.ppid
		}
		return false
	}
	for p, pt := range all {
		if ours(p) {
			procs[p] = pt
		}
	}
	return procs
}

func sumTicks(procs map[int]procTimes) time.Duration {
	var total uint64
	for _, pt := range procs {
		total += pt.ticks + pt.child
	}
	return time.Duration(total) * time.Second / clockTicks
}

// cachedTree reads the CPU time of a process tree whose members change
// rarely: the tree is listed from /proc at most once per treeTTL, and in
// between only its known members are read (one small file each). A
// process that joined since the last listing is missed until the next;
// one that ended is counted in its parent's reaped children.
type cachedTree struct {
	mu   sync.Mutex
	at   time.Time
	pids []int
}

// members returns the tree's processes, listing them anew when the last
// listing is older than treeTTL; then it returns the listing's readings
// as well (nil when it reused the last).
func (c *cachedTree) members(root int) ([]int, map[int]procTimes, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pids != nil && time.Since(c.at) <= treeTTL {
		return c.pids, nil, nil
	}
	procs, err := listTree([]int{root})
	if err != nil {
		return nil, nil, err
	}
	c.pids, c.at = slices.Collect(maps.Keys(procs)), time.Now()
	return c.pids, procs, nil
}

// treeTTL is how long a listing of a process tree is reused.
const treeTTL = time.Second

func (c *cachedTree) cpu(root int) (time.Duration, error) {
	pids, listed, err := c.members(root)
	if err != nil {
		return 0, err
	}
	if listed != nil {
		return sumTicks(listed), nil
	}
	procs := map[int]procTimes{}
	for _, p := range pids {
		pt, err := readProcTimes(p)
		if err != nil {
			if p == root {
				return 0, err
			}
			continue // ended: its parent counts it once reaped
		}
		procs[p] = pt
	}
	return sumTicks(procs), nil
}
