package bench

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

// semTestWorkload is a short semaphore workload: 2 rounds of 50 ms a side.
func semTestWorkload() Workload {
	w := semaphoreWorkload(200 * time.Millisecond)
	w.Clients = 6
	w.Permits = 2
	return w
}

// withSemFloor runs the memory target beside the floor open gives, as the
// family "semtest".
func withSemFloor(t *testing.T, open semOpener) Target {
	t.Helper()
	semFloors["semtest"] = open
	t.Cleanup(func() { delete(semFloors, "semtest") })
	tg := MemoryTarget()
	tg.Backend = "semtest"
	return tg
}

// The semaphore workload measures dlock and the floor side by side: two
// rows, the floor's rate paired with dlock's, an ideal from the measured
// hold, no violation of a correct semaphore on either side.
func TestRunSemaphoreBesideItsFloor(t *testing.T) {
	for _, f := range []struct {
		name string
		url  func(t *testing.T) string
		open semOpener
	}{
		{"redis", func(t *testing.T) string { return testenv.Redis(t).URL }, internalSemFloor},
		{"etcd", func(t *testing.T) string { return testenv.Etcd(t).URL }, openEtcdSemFloor},
	} {
		t.Run(f.name, func(t *testing.T) {
			url := f.url(t)
			tg := withSemFloor(t, func(ctx context.Context, _ string, permits int) (Client, error) {
				return f.open(ctx, url, permits)
			})
			w := semTestWorkload()
			rows, err := RunSemaphore(ctxT(t, time.Minute), tg, w, 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 2 || rows[0].Skipped != "" || rows[1].Kind != KindFloor {
				t.Fatalf("rows: %+v, want dlock's and the floor's", rows)
			}
			d, fl := rows[0], rows[1]
			for _, r := range rows {
				if r.Grants == 0 || r.Violations != 0 || r.FencingViolations != 0 || r.Errors != 0 {
					t.Errorf("%s: %d grants, %d/%d violations, %d errors (%s)", r.Backend, r.Grants, r.Violations, r.FencingViolations, r.Errors, r.LastError)
				}
				if r.Ideal == nil || r.ToIdeal == nil || r.ToIdeal.Median <= 0 || r.ToIdeal.Median > 1.2 {
					t.Errorf("%s: ideal %v, ×ideal %v", r.Backend, r.Ideal, r.ToIdeal)
				}
				if r.Label != "semaphore n=2 c=6 hold=1ms" || len(r.Rounds) != 2 {
					t.Errorf("%s: label %q, %d rounds", r.Backend, r.Label, len(r.Rounds))
				}
			}
			if d.Floor != fl.Backend || d.RateToFloor == nil || d.FloorRate == nil {
				t.Errorf("dlock row: floor %q, rate×floor %v", d.Floor, d.RateToFloor)
			}
			if SemaphoreFloorNote(f.name) == "" {
				t.Errorf("the %s semaphore floor has no note", f.name)
			}
		})
	}
}

// brokenSem grants every acquire at once with the same token: the checker
// must see more holders than permits and tokens that do not increase.
type brokenSem struct{ acquires atomic.Int64 }

func (b *brokenSem) Acquire(context.Context, string) (Held, error) {
	b.acquires.Add(1)
	return noToken{release: func(context.Context) error { return nil }}, nil
}
func (b *brokenSem) FailedAttempts() uint64 { return 0 }
func (b *brokenSem) Close() error           { return nil }

func TestRunSemaphoreFindsViolationsOfABrokenSemaphore(t *testing.T) {
	tg := withSemFloor(t, func(context.Context, string, int) (Client, error) { return &brokenSem{}, nil })
	rows, err := RunSemaphore(ctxT(t, time.Minute), tg, semTestWorkload(), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	if d := rows[0]; d.Violations != 0 || d.FencingViolations != 0 {
		t.Errorf("memory: %d/%d violations, want none", d.Violations, d.FencingViolations)
	}
	if b := rows[1]; b.Violations == 0 || b.FencingViolations == 0 {
		t.Errorf("broken semaphore: %d exclusion and %d fencing violations, want both > 0", b.Violations, b.FencingViolations)
	}
}

// The semaphore workload has its table, in the text report and in the
// HTML one.
func TestSemaphoreTable(t *testing.T) {
	rows, err := RunSemaphore(ctxT(t, time.Minute), MemoryTarget(), semTestWorkload(), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Started: time.Now(), Rows: rows}
	var txt, html bytes.Buffer
	rep.WriteTable(&txt)
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{txt.String(), html.String()} {
		for _, want := range []string{"semaphore n=2 c=6 hold=1ms", "permits=2", "×ideal", "rate×floor", "acq p99", "memory"} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, txt.String())
			}
		}
	}
}
