package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// PinCPUs runs this process (every thread it has, and so every thread and
// child it starts later) on the first half of the machine's CPUs and the
// processes servers (the servers dlockbench started: their threads, their
// children, and the children they fork later, which inherit it) on the
// other half, until Unpin.
//
// Why: on a small machine the kernel places each server process (a
// PostgreSQL backend per connection, a server thread per client) beside
// its client or on another CPU as it goes, and the two paths differ by a
// quarter of a round trip and more. Each connection then draws its own
// placement for a while: the same two statements on two connections of
// one process, in turns, differed by up to 30 % from one second to the
// next here (2 vCPUs), and the target with the better draw won. Pinned,
// every client's request and reply cross between the same CPUs, as they
// cross between machines in production, and the same statements on two
// connections agree within 1 %.
func PinCPUs(servers []int) (*Pinning, error) {
	all, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	if len(all) < 2 {
		return nil, fmt.Errorf("bench: pin CPUs: %d CPU usable, need 2", len(all))
	}
	if len(servers) == 0 {
		return nil, errors.New("bench: pin CPUs: no server process of dlockbench's own to pin (servers named with -url run where they run)")
	}
	p := &Pinning{Client: all[:len(all)/2], Server: all[len(all)/2:], all: all, servers: servers}
	if err := p.set(p.Server, p.Client); err != nil {
		_ = p.Unpin()
		return nil, err
	}
	return p, nil
}

// Pinning is PinCPUs in force.
type Pinning struct {
	// Client and Server are the CPUs of the clients and of the servers.
	Client, Server []int
	all            []int
	servers        []int
}

// Unpin lets this process's threads and the servers' processes (those
// forked while pinned too) run on every CPU this process could use
// before PinCPUs.
func (p *Pinning) Unpin() error { return p.set(p.all, p.all) }

// set puts the servers' trees on server and this process's threads on
// client.
func (p *Pinning) set(server, client []int) error {
	procs, err := listTree(p.servers)
	if err != nil {
		return fmt.Errorf("bench: pin CPUs: %w", err)
	}
	for pid := range procs {
		if err := pinThreads(pid, server); err != nil {
			return err
		}
	}
	return pinThreads(os.Getpid(), client)
}

// onlineCPUs lists the CPUs this process may run on.
func onlineCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("bench: pin CPUs: %w", err)
	}
	var cpus []int
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// pinThreads sets the CPU affinity of every thread of pid. A thread or
// process that ended meanwhile is skipped.
func pinThreads(pid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil // ended
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("bench: pin CPUs: thread %d of %d: %w", tid, pid, err)
		}
	}
	return nil
}
