package testenv

import (
	"syscall"
	"time"
)

// Hold sleeps d, a benchmark client's hold of a lock (dlockbench's
// workloads and paced references, the drivers' in-package handoff
// benchmarks), in the kernel on the calling goroutine's thread (nanosleep),
// not on the Go runtime's timers. A time.Sleep of d ends when the
// runtime's poller next wakes, and on Linux the poller waits in whole
// milliseconds: each time a network event wakes the process during the
// sleep (another client's reply, a watch event, a server's PING) with
// less than a millisecond left, the sleep ends a full millisecond after
// that event. So a time.Sleep(1ms) lasted up to 2ms, longer the more
// messages the process's other clients received during it: a handoff's
// holds were stretched by whatever its waiters were told, an artifact of
// running the clients as goroutines of one process (in separate
// processes, each holder's process is quiet). TestHoldIgnoresTheProcessTraffic
// shows both. A thread blocked in nanosleep costs no CPU, and only the
// CPU that other work takes from it delays its wake-up.
func Hold(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem // a signal woke it: sleep what is left
	}
}
