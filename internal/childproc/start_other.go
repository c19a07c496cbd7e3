//go:build !linux

package childproc

import "os/exec"

// start starts cmd; dieWithParent needs Linux's parent-death signal.
func start(cmd *exec.Cmd, _ bool) error { return cmd.Start() }
