package bench

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestWarmCPUs: each spinner runs under SCHED_IDLE on a CPU of its own,
// and stop ends it.
func TestWarmCPUs(t *testing.T) {
	stop, pids, err := WarmCPUs(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 2 {
		stop()
		t.Fatalf("%d spinners, want 2", len(pids))
	}
	cpus, err := onlineCPUs()
	if err != nil {
		stop()
		t.Fatal(err)
	}
	for i, pid := range pids {
		policy, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, uintptr(pid), 0, 0)
		if e != 0 || policy != schedIdle {
			stop()
			t.Fatalf("spinner %d: policy %d (%v), want SCHED_IDLE (%d)", pid, policy, e, schedIdle)
		}
		// Each on a CPU of its own.
		if got, want := allowed(t, pid), strconv.Itoa(cpus[i%len(cpus)]); got != want {
			stop()
			t.Fatalf("spinner %d runs on CPUs %s, want %s", pid, got, want)
		}
	}
	stop()
	for _, pid := range pids {
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("spinner %d still there after stop", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
