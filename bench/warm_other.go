//go:build !linux

package bench

import "errors"

// WarmCPUs keeps the CPUs out of their idle state (see warm_linux.go):
// Linux only.
func WarmCPUs(n int) (stop func(), pids []int, err error) {
	return nil, nil, errors.New("bench: warm CPUs: Linux only (SCHED_IDLE)")
}
