//go:build linux

package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr puts the server in a process group of its own (so Kill,
// Pause and Close reach its children too) and asks the kernel to SIGKILL it
// when the thread that started it dies. Servers are started from one
// goroutine locked to an OS thread that never exits (see spawn), so the
// parent-death signal fires exactly when the test binary dies, even by a
// panic or a -timeout.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

// becomeSubreaper makes this process the reaper of its orphaned descendants:
// when a server's parent process is killed, its children (PostgreSQL
// backends, a Redis fork) are re-parented here instead of to PID 1, which in
// a container often never reaps them, and reapGroup collects them.
func becomeSubreaper() {
	const prSetChildSubreaper = 36
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// groupMembers lists the processes whose process group is pgid, with their
// parent pid and state.
func groupMembers(pgid int) []procStat {
	var out []procStat
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pg, _ := strconv.Atoi(f[2])
		if pg == pgid {
			out = append(out, procStat{pid: pid, ppid: ppid, state: f[0]})
		}
	}
	return out
}

type procStat struct {
	pid, ppid int
	state     string
}

// reapGroup SIGKILLs what is left of process group pgid and waits (up to
// timeout) until none of it is left, reaping the members re-parented to
// this process. It reports whether the group is gone.
func reapGroup(pgid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	me := os.Getpid()
	for {
		ms := groupMembers(pgid)
		if len(ms) == 0 {
			return true
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		for _, m := range ms {
			if m.ppid == me {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(m.pid, &ws, syscall.WNOHANG, nil)
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processGone reports whether pid no longer exists (a zombie counts as
// existing: it has not been reaped).
func processGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
