package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// start starts cmd; with dieWithParent the child gets SIGKILL when this
// process dies. The kernel sends that signal when the thread that forked
// the child exits, not the process: such children are started from one
// OS thread that never exits.
func start(cmd *exec.Cmd, dieWithParent bool) error {
	if !dieWithParent {
		return cmd.Start()
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error, 1)
	spawner() <- func() { errc <- cmd.Start() }
	return <-errc
}

var spawner = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})
