//go:build unix

package childproc

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

const signals = true

const (
	sigKill = int(syscall.SIGKILL)
	sigStop = int(syscall.SIGSTOP)
	sigCont = int(syscall.SIGCONT)
)

// ownGroup makes the child the leader of a new process group, which
// everything it starts joins.
func ownGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// signalGroup signals the process group p leads.
func signalGroup(p *os.Process, sig int) error {
	err := syscall.Kill(-p.Pid, syscall.Signal(sig))
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
