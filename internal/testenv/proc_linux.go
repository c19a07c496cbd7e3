//go:build linux

package testenv

import (
	"os"
	"path/filepath"
	"slices"
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
// a container often never reaps them, and reapTree collects them.
func becomeSubreaper() {
	const prSetChildSubreaper = 36
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// procTable reads every process's parent and process group from /proc.
func procTable() map[int]procStat {
	out := map[int]procStat{}
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
		out[pid] = procStat{pid: pid, ppid: ppid, pgrp: pg, state: f[0]}
	}
	return out
}

type procStat struct {
	pid, ppid, pgrp int
	state           string
}

// processTree returns pid, the members of its process group and all their
// descendants: PostgreSQL backends call setsid and leave the group, so the
// group alone is not the whole server.
func processTree(pid int) []int {
	tab := procTable()
	in := map[int]bool{pid: true}
	for p, st := range tab {
		if st.pgrp == pid {
			in[p] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for p, st := range tab {
			if !in[p] && in[st.ppid] {
				in[p], changed = true, true
			}
		}
	}
	out := make([]int, 0, len(in))
	for p := range in {
		out = append(out, p)
	}
	return out
}

// signalTree sends sig to pid's process group and every process of its tree.
func signalTree(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	for _, p := range processTree(pid) {
		_ = syscall.Kill(p, sig)
	}
	return err
}

// killTree stops the tree of pid (so that nothing forks meanwhile), then
// SIGKILLs every process of it and returns them for reapTree.
func killTree(pid int) []int {
	_ = syscall.Kill(-pid, syscall.SIGSTOP)
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	tree := processTree(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, p := range tree {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return tree
}

// reapTree waits (up to timeout) until every process of pids and of the
// process group pgid is gone, SIGKILLing stragglers and reaping those that
// were re-parented to this process. It reports whether all are gone.
func reapTree(pgid int, pids []int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	me := os.Getpid()
	for {
		left := 0
		tab := procTable()
		check := func(p int, st procStat) {
			left++
			_ = syscall.Kill(p, syscall.SIGKILL)
			if st.ppid == me {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(p, &ws, syscall.WNOHANG, nil)
			}
		}
		for _, p := range pids {
			if st, ok := tab[p]; ok {
				check(p, st)
			}
		}
		for p, st := range tab {
			if st.pgrp == pgid && !slices.Contains(pids, p) {
				check(p, st)
			}
		}
		if left == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// processGone reports whether pid no longer exists (a zombie counts as
// existing: it has not been reaped).
func processGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
