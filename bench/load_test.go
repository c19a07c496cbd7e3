package bench

import (
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestParseProcFiles(t *testing.T) {
	if v, err := parseLoadavg("0.42 0.38 0.58 1/234 5678\n"); err != nil || v != 0.42 {
		t.Errorf("parseLoadavg = %v, %v; want 0.42", v, err)
	}
	stat := "cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 50 2 25 400 20 1 1 0 0 0\nintr 1\n"
	busy, total, err := parseCPULine(stat)
	if err != nil || busy != 160 || total != 1000 {
		t.Errorf("parseCPULine = %d busy, %d total, %v; want 160 (user+nice+system+irq+softirq+steal) of 1000 (guest is in user)", busy, total, err)
	}
	for _, bad := range []string{"", "intr 5\n", "cpu  1 2 x 4 5\n"} {
		if _, _, err := parseCPULine(bad); err == nil {
			t.Errorf("parseCPULine(%q) accepted it", bad)
		}
	}
	if _, err := parseLoadavg("high"); err == nil {
		t.Error("parseLoadavg accepted a word")
	}
	l := loadBetween(loadSample{avg1: 0.4, busy: 100, total: 1000}, loadSample{avg1: 1.9, busy: 900, total: 2000, ours: 7 * time.Second})
	if l.Avg1Start != 0.4 || l.Avg1End != 1.9 || l.BusyPct != 80 || l.OtherPct != 10 {
		t.Errorf("loadBetween = %+v; want loadavg 0.4 → 1.9, 80 %% busy of which 10 %% others (700 of 800 ticks ours)", l)
	}
}

// cpuOfSelf is this process's CPU time and its reaped children's, as
// the kernel accounts them to it.
func cpuOfSelf(t *testing.T) time.Duration {
	var self, kids syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids); err != nil {
		t.Fatal(err)
	}
	var d time.Duration
	for _, tv := range []syscall.Timeval{self.Utime, self.Stime, kids.Utime, kids.Stime} {
		d += time.Duration(tv.Nano())
	}
	return d
}

// TestLoadOnRealProc reads the real /proc around CPU this test burns, in
// this process and in a child process it reaps: both are the benchmark's
// own, not other processes'. (The machine may be busy with others: the
// test compares our share with what the kernel says we used, not with a
// wall-clock expectation.)
func TestLoadOnRealProc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	m := StartLoad()
	if m.err != nil {
		t.Fatal(m.err)
	}
	used0 := cpuOfSelf(t)
	var x atomic.Uint64
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
		for i := range 100_000 {
			x.Add(uint64(i))
		}
	}
	before, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	childCPU := child.ProcessState.UserTime() + child.ProcessState.SystemTime()
	after, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Ticks are 10 ms: allow two of them.
	if after-before < childCPU-20*time.Millisecond {
		t.Errorf("our CPU grew by %v while a child we reaped used %v: reaped children are not counted", after-before, childCPU)
	}
	end, err := m.sample()
	if err != nil {
		t.Fatal(err)
	}
	used := cpuOfSelf(t) - used0
	if ours := end.ours - m.start.ours; ours < used-30*time.Millisecond {
		t.Errorf("the meter counted %v of ours; the kernel says we used %v", ours, used)
	}
	l := loadBetween(m.start, end)
	t.Logf("load %+v; we used %v, the child %v", l, used, childCPU)
	if l.BusyPct <= 0 || l.BusyPct > 100 || l.OtherPct < 0 || l.OtherPct > l.BusyPct {
		t.Errorf("load = %+v; want 0 < busy ≤ 100 and 0 ≤ other ≤ busy", l)
	}
	if _, err := m.Stop(); err != nil {
		t.Error(err)
	}
	if _, err := treeCPU(-1); err == nil {
		t.Error("treeCPU of no readable process did not fail")
	}
}

// TestCachedTreeFollowsTheTree: the cached reading of a process tree agrees
// with a full listing, and grows with the CPU the tree burns between two
// readings of one listing.
func TestCachedTreeFollowsTheTree(t *testing.T) {
	var c cachedTree
	first, err := c.cpu(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	full, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := full - first; d < 0 || d > 200*time.Millisecond {
		t.Errorf("cached %v, full listing %v", first, full)
	}
	listed := c.at
	for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); {
	}
	again, err := c.cpu(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if c.at != listed {
		t.Errorf("listed again after %v, within treeTTL", time.Since(listed))
	}
	if again-first < 50*time.Millisecond {
		t.Errorf("150 ms of spinning: CPU %v → %v", first, again)
	}
	if _, err := (&cachedTree{}).cpu(1 << 30); err == nil {
		t.Error("a process that does not exist: no error")
	}
}

// TestListTreeWalksTheChildren: the walk of the kernel's children lists
// finds the same processes as a scan of all of /proc, grandchildren
// included.
func TestListTreeWalksTheChildren(t *testing.T) {
	if !hasChildrenLists() {
		t.Skip("the kernel lacks the children-lists capability (CONFIG_PROC_CHILDREN): listTree scans /proc")
	}
	// The shell, a child shell with its sleep (a grandchild), a sleep.
	cmd := exec.Command("sh", "-c", "sh -c 'sleep 30 & wait' & sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var walked, scanned map[int]procTimes
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if walked, err = listTree([]int{cmd.Process.Pid}); err != nil {
			t.Fatal(err)
		}
		root, _ := readProcTimes(cmd.Process.Pid)
		scanned = scanTree(map[int]procTimes{cmd.Process.Pid: root})
		if len(walked) >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the shell has not forked both yet
	}
	if len(walked) != 4 || !maps.EqualFunc(walked, scanned, func(a, b procTimes) bool { return a.ppid == b.ppid }) {
		t.Errorf("walked %v, scanned %v; want the shell, its child shell, two sleeps in both", slices.Sorted(maps.Keys(walked)), slices.Sorted(maps.Keys(scanned)))
	}
}
