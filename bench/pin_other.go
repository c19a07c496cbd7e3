//go:build !linux

package bench

import "errors"

// PinCPUs pins the clients and the servers to CPUs of their own (see
// pin_linux.go): Linux only.
func PinCPUs(servers []int) (*Pinning, error) {
	return nil, errors.New("bench: pin CPUs: Linux only (sched_setaffinity)")
}

// Pinning is PinCPUs in force.
type Pinning struct{ Client, Server []int }

// Unpin undoes PinCPUs.
func (p *Pinning) Unpin() error { return nil }
