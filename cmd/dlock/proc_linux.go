package main

import "syscall"

// setParentDeathSignal makes the kernel send SIGKILL to COMMAND when the
// thread that started it (kept locked by runCommand) dies with dlock.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
