package bench

import (
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPinCPUs: the server's process, the child it had, and the child it
// forks after pinning all run on the servers' CPUs, and this process (so
// every thread it has) on the clients'; they do not overlap.
func TestPinCPUs(t *testing.T) {
	all, err := onlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 {
		// Nothing to pin: PinCPUs refuses.
		if _, err := PinCPUs([]int{os.Getpid()}); err == nil {
			t.Fatalf("PinCPUs on %d CPU: no error", len(all))
		}
		return
	}
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Give every thread of the test binary its CPUs back.
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				_ = unix.SchedSetaffinity(tid, &mine)
			}
		}
	})
	// A "server": a shell with a child now, and another one a moment
	// after it was pinned.
	srv := exec.Command("/bin/sh", "-c", "sleep 30 & sleep 0.5; sleep 30 & wait")
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-srv.Process.Pid, syscall.SIGKILL); srv.Wait() }()
	waitChildren(t, srv.Process.Pid, 1)
	before, err := listTree([]int{srv.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	pinning, err := PinCPUs([]int{srv.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	client, server := pinning.Client, pinning.Server
	if len(client) == 0 || len(server) == 0 || slices.ContainsFunc(client, func(c int) bool { return slices.Contains(server, c) }) {
		t.Fatalf("client CPUs %v, server CPUs %v: want two disjoint sets", client, server)
	}
	// Wait for the child forked after pinning.
	var procs map[int]procTimes
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if procs, err = listTree([]int{srv.Process.Pid}); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(slices.Collect(maps.Keys(procs)), func(p int) bool { _, old := before[p]; return !old }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new child in the server's tree %v", procs)
		}
	}
	for pid := range procs {
		if got := allowed(t, pid); got != FormatCPUs(server) {
			t.Errorf("server process %d runs on CPUs %s, want %s", pid, got, FormatCPUs(server))
		}
	}
	if got := allowed(t, os.Getpid()); got != FormatCPUs(client) {
		t.Errorf("this process runs on CPUs %s, want %s", got, FormatCPUs(client))
	}
	// Unpin: everything, the children forked while pinned included, on
	// every CPU again.
	if err := pinning.Unpin(); err != nil {
		t.Fatal(err)
	}
	for pid := range procs {
		if got := allowed(t, pid); got != FormatCPUs(all) {
			t.Errorf("after Unpin, server process %d runs on CPUs %s, want %s", pid, got, FormatCPUs(all))
		}
	}
	if got := allowed(t, os.Getpid()); got != FormatCPUs(all) {
		t.Errorf("after Unpin, this process runs on CPUs %s, want %s", got, FormatCPUs(all))
	}
}

// TestPinCPUsNeedsAServer: with no server of its own to pin (-url runs)
// PinCPUs refuses and changes nothing.
func TestPinCPUsNeedsAServer(t *testing.T) {
	before := allowed(t, os.Getpid())
	if _, err := PinCPUs(nil); err == nil {
		t.Fatal("PinCPUs(nil): no error")
	}
	if after := allowed(t, os.Getpid()); after != before {
		t.Fatalf("CPUs %s after a refused PinCPUs, were %s", after, before)
	}
}

func TestFormatCPUs(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{0}, "0"}, {[]int{0, 1}, "0-1"}, {[]int{0, 1, 2}, "0-2"}, {[]int{0, 2, 3, 4, 7}, "0,2-4,7"}, {[]int{1, 3}, "1,3"}} {
		if got := FormatCPUs(c.in); got != c.want {
			t.Errorf("FormatCPUs(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// allowed is the kernel's list of the CPUs pid may run on.
func allowed(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for %d", pid)
	return ""
}

// waitChildren waits until pid has at least n children.
func waitChildren(t *testing.T, pid, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(childrenOf(pid)) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d: %d children, want %d", pid, len(childrenOf(pid)), n)
		}
	}
}
