//go:build !unix

package childproc

import (
	"errors"
	"os"
	"os/exec"
)

const signals = false

const (
	sigKill = iota
	sigStop
	sigCont
)

func ownGroup(*exec.Cmd) {}

// signalGroup kills the child alone: there are no process groups here,
// nor stop and continue signals.
func signalGroup(p *os.Process, sig int) error {
	if sig == sigKill {
		return p.Kill()
	}
	return errors.ErrUnsupported
}
