//go:build !linux

package bench

import "time"

// sleepHold sleeps d, a client's hold of a lock (see hold_linux.go; here on
// the Go runtime's timers).
func sleepHold(d time.Duration) { time.Sleep(d) }
