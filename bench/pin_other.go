//go:build !linux

package bench

import "errors"

// PinCPUs pins the clients and the servers to CPUs of their own (see
// pin_linux.go): Linux only.
func PinCPUs(servers []int) (client, server []int, err error) {
	return nil, nil, errors.New("bench: pin CPUs: Linux only (sched_setaffinity)")
}
