package bench

import (
	"fmt"
	"os/exec"
	"syscall"
	"unsafe"
)

// schedIdle is Linux's SCHED_IDLE scheduling policy: a thread that runs
// only when no other thread of the CPU wants to, and that a waking
// thread preempts at once.
const schedIdle = 5

// WarmCPUs starts n processes that keep the CPUs out of their idle state
// at the lowest scheduling priority there is (SCHED_IDLE): a loop that
// spins whenever nothing else wants the CPU. On a virtual machine whose
// idle vCPUs halt, a reply that arrives while they are idle waits for
// one to wake (tens of µs); the machine then alternates between fast and
// slow phases, and the uncontended figures of a run mix both (a Redis
// round trip of 16 µs in one round and 55 µs in the next, here). The
// spinners take no CPU that any other thread asks for. They are this
// process's children (the run's load figures count them as its own, not
// as other work), die with it (Pdeathsig), and stop ends them. pids are
// theirs. Spinner i runs on the i-th CPU this process may use, so that
// each CPU has its own (the scheduler, left alone, may put two on one).
func WarmCPUs(n int) (stop func(), pids []int, err error) {
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, nil, err
	}
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
		cmds = nil
	}
	for range n {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("bench: warm CPUs: %w", err)
		}
		cmds = append(cmds, c)
		pids = append(pids, c.Process.Pid)
		param := struct{ priority int32 }{0}
		if _, _, e := syscall.Syscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(c.Process.Pid), schedIdle, uintptr(unsafe.Pointer(&param))); e != 0 {
			stop()
			return nil, nil, fmt.Errorf("bench: warm CPUs: SCHED_IDLE: %w", e)
		}
		if err := pinThreads(c.Process.Pid, []int{cpus[(len(pids)-1)%len(cpus)]}); err != nil {
			stop()
			return nil, nil, err
		}
	}
	return stop, pids, nil
}
