//go:build !linux

package testenv

import "time"

// Hold sleeps d, a client's hold of a lock (see hold_linux.go; here on
// the Go runtime's timers).
func Hold(d time.Duration) { time.Sleep(d) }
