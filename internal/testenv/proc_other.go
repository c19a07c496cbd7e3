//go:build !linux

package testenv

import (
	"syscall"
	"time"
)

// sysProcAttr puts the server in a process group of its own. Outside Linux
// there is no parent-death signal: a test binary that dies hard may leave
// servers behind; the next run removes their directories.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

func becomeSubreaper() {}

func signalTree(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

func killTree(pid int) []int {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return []int{pid}
}

func reapTree(pgid int, pids []int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for syscall.Kill(-pgid, 0) == nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func processGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}

func processTree(pid int) []int { return []int{pid} }
