//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// forwardedSignals are the signals dlock passes on to COMMAND.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// terminates reports whether sig ends dlock while it waits for the lock
// (USR1 and USR2 are ignored then: there is no COMMAND to pass them to).
func terminates(sig os.Signal) bool {
	return sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2
}

// setProcAttr puts COMMAND in its own process group, so that a signal
// reaches everything it started, and (on Linux) has the kernel kill it if
// dlock dies: without dlock nothing keeps the lease alive.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
}

// signalGroup sends sig to COMMAND's process group, or to COMMAND alone
// when it has left its group.
func signalGroup(p *os.Process, sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		_ = p.Signal(sig)
		return
	}
	if err := syscall.Kill(-p.Pid, s); errors.Is(err, syscall.ESRCH) {
		_ = p.Signal(sig)
	}
}
