package conformance_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/conformance"
)

func TestSemRegister(t *testing.T) {
	r := conformance.NewSemRegister(2)
	for _, w := range []struct {
		tok uint64
		ok  bool
	}{{1, true}, {3, true}, {2, true}, {1, false}, {3, true}, {5, true}, {2, false}, {3, true}} {
		err := r.Write(w.tok)
		if (err == nil) != w.ok {
			t.Errorf("Write(%d) = %v, want ok=%v", w.tok, err, w.ok)
		}
		if err != nil && !errors.Is(err, conformance.ErrStaleToken) {
			t.Errorf("Write(%d) = %v, want ErrStaleToken", w.tok, err)
		}
	}
	if n, rej := r.Stats(); n != 8 || rej != 2 {
		t.Errorf("Stats = %d, %d; want 8, 2", n, rej)
	}
}

func TestCheckFencedSemaphore(t *testing.T) {
	const (
		acq = conformance.OpAcquire
		rel = conformance.OpRelease
		wr  = conformance.OpWrite
		lst = conformance.OpLost
	)
	for _, tc := range []struct {
		name    string
		n       int
		fencing bool
		ops     []conformance.Op
		legal   bool
	}{
		{"two holders of two", 2, true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(1, acq, 2, true, 0, 10), op(0, wr, 1, true, 11, 12),
			op(1, wr, 2, true, 11, 12), op(0, rel, 1, true, 13, 20), op(1, rel, 2, true, 13, 20),
		}, true},
		{"three holders of two", 2, true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(1, acq, 2, true, 0, 10), op(2, acq, 3, true, 11, 12),
			op(0, rel, 1, true, 13, 20), op(1, rel, 2, true, 13, 20), op(2, rel, 3, true, 21, 22),
		}, false},
		{"a release frees a permit", 2, true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(1, acq, 2, true, 0, 10), op(0, rel, 1, true, 11, 20),
			op(2, acq, 3, true, 15, 25), op(1, rel, 2, true, 26, 27), op(2, rel, 3, true, 28, 29),
		}, true},
		{"a token repeated", 2, true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(0, rel, 1, true, 11, 12), op(1, acq, 1, true, 13, 14),
		}, false},
		{"a token repeated without fencing", 2, false, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(0, rel, 1, true, 11, 12), op(1, acq, 1, true, 13, 14),
		}, true},
		{"a loss in its window explains a grant", 1, true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(0, lst, 1, true, 0, 30), op(1, acq, 2, true, 20, 25),
		}, true},
		{"a stale write rejected", 1, true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(0, lst, 1, true, 0, 30), op(1, acq, 2, true, 20, 25),
			op(1, wr, 2, true, 26, 26), op(0, wr, 1, false, 40, 40),
		}, true},
		{"a stale write accepted", 1, true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(0, lst, 1, true, 0, 30), op(1, acq, 2, true, 20, 25),
			op(1, wr, 2, true, 26, 26), op(0, wr, 1, true, 40, 40),
		}, false},
		{"a write refused without cause", 2, true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(0, wr, 1, false, 11, 11),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := conformance.CheckFencedSemaphore(tc.ops, tc.n, conformance.FencedOptions{Fencing: tc.fencing, Dir: t.TempDir()})
			if (err == nil) != tc.legal {
				t.Fatalf("CheckFencedSemaphore = %v, want legal=%v", err, tc.legal)
			}
			if err != nil && !strings.Contains(err.Error(), "semaphore of") {
				t.Errorf("error %q does not name the model", err)
			}
		})
	}
	if err := conformance.CheckFencedSemaphore(nil, conformance.MaxModelPermits+1, conformance.FencedOptions{}); err == nil {
		t.Error("a semaphore larger than the model was accepted")
	}
}
