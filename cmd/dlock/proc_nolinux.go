//go:build unix && !linux

package main

import "syscall"

// setParentDeathSignal does nothing: only Linux has a parent-death signal.
// COMMAND outlives a dlock killed with SIGKILL there.
func setParentDeathSignal(*syscall.SysProcAttr) {}
