//go:build unix

package conformance

import (
	"os"
	"syscall"
)

const signalsSupported = true

func pauseProcess(p *os.Process) error  { return p.Signal(syscall.SIGSTOP) }
func resumeProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
