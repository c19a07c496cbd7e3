//go:build !unix

package main

import (
	"os"
	"os/exec"
)

var forwardedSignals = []os.Signal{os.Interrupt}

func terminates(os.Signal) bool { return true }

func setProcAttr(*exec.Cmd) {}

// signalGroup: without process groups, the interrupt cannot be delivered
// and anything else ends COMMAND.
func signalGroup(p *os.Process, sig os.Signal) {
	if err := p.Signal(sig); err != nil {
		_ = p.Kill()
	}
}
