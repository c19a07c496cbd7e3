package conformance_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/conformance"
)

func TestRegisterRejectsStaleTokens(t *testing.T) {
	var r conformance.Register
	for _, w := range []struct {
		tok uint64
		ok  bool
	}{{1, true}, {1, true}, {3, true}, {2, false}, {3, true}, {4, true}, {1, false}} {
		err := r.Write(w.tok, w.tok)
		if (err == nil) != w.ok {
			t.Errorf("Write(%d) = %v, want ok=%v", w.tok, err, w.ok)
		}
		if err != nil && !errors.Is(err, conformance.ErrStaleToken) {
			t.Errorf("Write(%d) = %v, want ErrStaleToken", w.tok, err)
		}
	}
	if tok, v := r.Read(); tok != 4 || v != uint64(4) {
		t.Errorf("Read = %d, %v; want 4, 4", tok, v)
	}
	if n, rej := r.Stats(); n != 7 || rej != 2 {
		t.Errorf("Stats = %d, %d; want 7, 2", n, rej)
	}
}

func op(client int, kind conformance.OpKind, tok uint64, ok bool, call, ret int64) conformance.Op {
	return conformance.Op{Client: client, Kind: kind, Token: tok, OK: ok, Call: call, Return: ret}
}

func TestCheckFenced(t *testing.T) {
	const (
		acq = conformance.OpAcquire
		rel = conformance.OpRelease
		wr  = conformance.OpWrite
		lst = conformance.OpLost
	)
	for _, tc := range []struct {
		name    string
		fencing bool
		ops     []conformance.Op
		legal   bool
	}{
		{"hand-off", true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(1, acq, 2, true, 5, 40), op(0, wr, 1, true, 11, 12),
			op(0, rel, 1, true, 13, 30), op(1, wr, 2, true, 41, 42), op(1, rel, 2, true, 43, 44),
		}, true},
		{"concurrent calls may linearise either way", true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(0, rel, 1, true, 11, 20), op(1, acq, 2, true, 15, 25),
		}, true},
		{"overlapping grants", true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(1, acq, 2, true, 11, 20), op(0, rel, 1, true, 21, 30),
		}, false},
		{"token goes back", true, []conformance.Op{
			op(0, acq, 5, true, 0, 10), op(0, rel, 5, true, 11, 20), op(1, acq, 3, true, 21, 30),
		}, false},
		{"token goes back without fencing", false, []conformance.Op{
			op(0, acq, 5, true, 0, 10), op(0, rel, 5, true, 11, 20), op(1, acq, 3, true, 21, 30),
		}, true},
		{"release by another client", true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(1, rel, 1, true, 11, 20),
		}, false},
		{"paused holder fenced off", true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(0, wr, 1, true, 11, 12), op(0, lst, 1, true, 13, 100),
			op(1, acq, 2, true, 50, 60), op(1, wr, 2, true, 61, 62), op(0, wr, 1, false, 101, 102),
		}, true},
		{"stale write accepted", true, []conformance.Op{
			op(0, acq, 1, true, 0, 10), op(0, lst, 1, true, 13, 100),
			op(1, acq, 2, true, 50, 60), op(1, wr, 2, true, 61, 62), op(0, wr, 1, true, 101, 102),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := conformance.CheckFenced(tc.ops, conformance.FencedOptions{Fencing: tc.fencing, Dir: dir, Name: "t"})
			if tc.legal {
				if err != nil {
					t.Fatalf("a legal history was rejected: %v", err)
				}
				return
			}
			var fe *conformance.FencedError
			if !errors.As(err, &fe) {
				t.Fatalf("CheckFenced = %v, want a *FencedError", err)
			}
			if fe.Visualization == "" || !strings.Contains(err.Error(), fe.Visualization) {
				t.Fatalf("the error does not name the visualisation: %v", err)
			}
			html, rerr := os.ReadFile(fe.Visualization)
			if rerr != nil || !strings.Contains(string(html), "<html") {
				t.Fatalf("the visualisation %s is not HTML: %v", fe.Visualization, rerr)
			}
		})
	}
}

func TestHistoryRecords(t *testing.T) {
	h := conformance.NewHistory()
	end := h.Begin(3, conformance.OpAcquire)
	end(7, true)
	h.Begin(3, conformance.OpRelease)(7, true)
	ops := h.Ops()
	if len(ops) != 2 || ops[0].Token != 7 || ops[0].Client != 3 || ops[0].Call > ops[0].Return || ops[1].Call < ops[0].Return {
		t.Fatalf("recorded %+v", ops)
	}
	if err := conformance.CheckFenced(ops, conformance.FencedOptions{Fencing: true}); err != nil {
		t.Fatal(err)
	}
}
