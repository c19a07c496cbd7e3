package bench

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// clockBase and clockOffset make Now read the system's CLOCK_MONOTONIC
// (shared by every process on the machine) at the cost of Go's vDSO clock:
// Go's monotonic clock is CLOCK_MONOTONIC minus a per-process origin.
var (
	clockBase   = time.Now()
	clockOffset = func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return 0
		}
		return ts.Nano() - int64(time.Since(clockBase))
	}()
)

// Now returns the time in nanoseconds on the one monotonic clock every
// measurement uses, in every process of a run.
func Now() int64 { return int64(time.Since(clockBase)) + clockOffset }

// Checker watches the critical sections of every client of a run, in this
// process or in others (through a shared memory file), on one clock:
//   - mutual exclusion: a count of holders per name, which must never
//     exceed one;
//   - fencing: each holder's token must exceed the previous holder's (for
//     implementations that promise fencing);
//   - handoff: the time from a holder's release call to the next holder's
//     acquire returning, when that holder was already waiting.
type Checker struct {
	w    []uint64 // header + slotWords per name
	mm   []byte   // the mapping, when shared
	path string
}

const (
	hdrWords  = 8 // [0] exclusion violations, [1] fencing violations
	slotWords = 4 // [0] holders, [1] last token, [2] last release (Now), [3] unused
)

// NewChecker returns a checker for n names, private to this process.
func NewChecker(n int) *Checker {
	return &Checker{w: make([]uint64, hdrWords+slotWords*n)}
}

// NewSharedChecker creates a checker for n names in a new file in dir that
// other processes open with OpenChecker.
func NewSharedChecker(dir string, n int) (*Checker, error) {
	f, err := os.CreateTemp(dir, "dlockbench-check-*")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(int64(8 * (hdrWords + slotWords*n))); err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	c, err := OpenChecker(f.Name())
	if err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	return c, nil
}

// OpenChecker maps the shared checker file at path.
func OpenChecker(path string) (*Checker, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < 8*hdrWords || st.Size()%8 != 0 {
		return nil, fmt.Errorf("bench: checker file %s has a bad size %d", path, st.Size())
	}
	mm, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("bench: map checker: %w", err)
	}
	// The mapping is page-aligned, so every word is 8-byte aligned.
	w := unsafe.Slice((*uint64)(unsafe.Pointer(&mm[0])), len(mm)/8)
	return &Checker{w: w, mm: mm, path: path}, nil
}

// Path is the shared file's path ("" when private).
func (c *Checker) Path() string { return c.path }

// Close unmaps a shared checker; remove deletes its file too.
func (c *Checker) Close(remove bool) error {
	if c.mm == nil {
		return nil
	}
	err := unix.Munmap(c.mm)
	c.mm, c.w = nil, nil
	if remove {
		os.Remove(c.path)
	}
	return err
}

func (c *Checker) slot(i int) []uint64 {
	return c.w[hdrWords+slotWords*i : hdrWords+slotWords*(i+1)]
}

// Enter records that a client holds name i with token tok; it began
// acquiring at start and the acquire returned at got. It returns the
// handoff latency when the previous holder released while this client was
// waiting, else -1.
func (c *Checker) Enter(i int, tok uint64, fenced bool, start, got int64) (handoff int64) {
	s := c.slot(i)
	if atomic.AddUint64(&s[0], 1) != 1 {
		atomic.AddUint64(&c.w[0], 1)
	}
	if fenced {
		if prev := atomic.LoadUint64(&s[1]); tok <= prev {
			atomic.AddUint64(&c.w[1], 1)
		}
		atomic.StoreUint64(&s[1], tok)
	}
	handoff = -1
	if rel := int64(atomic.LoadUint64(&s[2])); rel > start {
		handoff = got - rel
	}
	return handoff
}

// Exit records that the holder of name i is about to call release.
func (c *Checker) Exit(i int) {
	s := c.slot(i)
	atomic.StoreUint64(&s[2], uint64(Now()))
	atomic.AddUint64(&s[0], ^uint64(0))
}

// Violations returns the mutual-exclusion and the fencing violations seen.
func (c *Checker) Violations() (exclusion, fencing uint64) {
	return atomic.LoadUint64(&c.w[0]), atomic.LoadUint64(&c.w[1])
}
