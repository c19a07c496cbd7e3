package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseSchedstat(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"166941 419571 2\n", 166941, true},
		{"0 0 0", 0, true},
		{"", 0, false},
		{"x 1 2", 0, false},
		{"-5 1 2", 0, false},
	} {
		got, ok := parseSchedstat(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseSchedstat(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestParseWriteBytes(t *testing.T) {
	io := "rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n"
	if got, ok := parseWriteBytes(io); got != 8192 || !ok {
		t.Errorf("parseWriteBytes = %d, %v; want 8192, true", got, ok)
	}
	if _, ok := parseWriteBytes("rchar: 1\n"); ok {
		t.Error("parseWriteBytes of a file without write_bytes succeeded")
	}
}

func TestParseInflight(t *testing.T) {
	if got, ok := parseInflight("       0        3\n"); got != 3 || !ok {
		t.Errorf("parseInflight = %d, %v; want the writes, 3, true", got, ok)
	}
	if _, ok := parseInflight("7"); ok {
		t.Error("parseInflight of one field succeeded")
	}
	for name, want := range map[string]bool{"vda": true, "sda": true, "nvme0n1": true, "loop3": false, "zram0": false, "dm-0": false, "ram1": false} {
		if got := storageDisk(name); got != want {
			t.Errorf("storageDisk(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestQuietVerdict checks the settle decision: quiet only when every
// watched server ran less than settleMaxCPU of the window, none wrote to
// storage, and no disk write is in flight.
func TestQuietVerdict(t *testing.T) {
	t0 := time.Unix(1000, 0)
	window := 30 * time.Millisecond
	prev := quietReading{at: t0}
	limit := int64(float64(window) * settleMaxCPU)
	read := func(run, written int64, inFlight uint64) quietReading {
		return quietReading{at: t0.Add(window), servers: []serverReading{{"redis", limit, 0}, {"pg", run, written}}, inFlight: inFlight}
	}
	for _, c := range []struct {
		name string
		cur  quietReading
		busy string // "" quiet, else a part of the reason
	}{
		{"idle", read(0, 0, 0), ""},
		{"housekeeping below the limit", read(limit, 0, 0), ""},
		{"CPU above the limit", read(limit+1, 0, 0), "pg ran"},
		{"a write to storage", read(0, 4096, 0), "pg wrote 4096 bytes"},
		{"a disk write in flight", read(0, 0, 2), "2 disk writes in flight"},
	} {
		got := quietVerdict(prev, c.cur, window)
		if (got == "") != (c.busy == "") || !strings.Contains(got, c.busy) {
			t.Errorf("%s: quietVerdict = %q, want %q", c.name, got, c.busy)
		}
	}
	r := read(0, 0, 5)
	r.diskErr = os.ErrNotExist
	if got := quietVerdict(prev, r, window); got != "" {
		t.Errorf("with no disk figures: quietVerdict = %q, want quiet", got)
	}
}

func TestSettleRoundsAndCaveat(t *testing.T) {
	figs := []RoundFigures{
		{Round: 0, GrantsPerSec: 10, Settle: SettleWait{WaitNs: 30, Settles: 1}},
		{Round: 1, GrantsPerSec: 20, Settle: SettleWait{WaitNs: 1000, Settles: 1, TimedOut: 1, Busy: "pg ran"}, Background: &Background{CPUNs: 5}},
	}
	sum, rounds := settleRounds(figs)
	if sum == nil || sum.WaitNs != 1030 || sum.Settles != 2 || sum.TimedOut != 1 || sum.Busy != "pg ran" || len(rounds) != 2 || rounds[1].Background.CPUNs != 5 {
		t.Errorf("settleRounds = %+v, %+v", sum, rounds)
	}
	if sum, rounds := settleRounds([]RoundFigures{{Round: 0}}); sum != nil || rounds != nil {
		t.Errorf("settleRounds without settles = %+v, %+v; want nil, nil", sum, rounds)
	}
	if sum, rounds := settleRounds([]RoundFigures{{Round: 0, Background: &Background{CPUNs: 1}}}); sum != nil || len(rounds) != 1 {
		t.Errorf("settleRounds of watched rounds = %+v, %+v; want no sum and the round", sum, rounds)
	}
	s := &SettleSummary{Waited: true, Settles: 100, TimedOut: 10, MaxWait: time.Second, Budget: time.Minute}
	if c := s.caveat(); c != "" {
		t.Errorf("10 %% timed out: caveat %q, want none", c)
	}
	s.TimedOut = 11
	if c := s.caveat(); !strings.Contains(c, "11 of 100 settles gave up") {
		t.Errorf("11 %% timed out: caveat %q", c)
	}
	s.Waited = false
	if c := s.caveat(); c != "" {
		t.Errorf("a run that only watched: caveat %q, want none", c)
	}
}

// burnEnv makes this test binary a process that burns CPU for the
// duration it holds, then sleeps (TestSettleWaitsForBusyServer's server).
const burnEnv = "DLOCKBENCH_TEST_BURN"

// TestSettleWaitsForBusyServer runs a process that burns CPU for 300 ms
// as a "server": a settle must wait until it has stopped, one that leaves
// it out must not, and a settle bounded below the burn must give up and
// say which server was busy.
func TestSettleWaitsForBusyServer(t *testing.T) {
	if d, err := time.ParseDuration(os.Getenv(burnEnv)); err == nil {
		end := time.Now().Add(d)
		fmt.Println("burning")
		for time.Now().Before(end) {
		}
		time.Sleep(time.Hour)
		return
	}
	if !hasSchedstat() {
		t.Skip("no /proc/<pid>/schedstat")
	}
	burn := func(d time.Duration) (*Server, time.Time) {
		pid := startBurner(t, d)
		return &Server{ID: "busy", PID: pid}, time.Now().Add(d)
	}
	// Only the process's CPU counts here: the machine's disks belong to
	// whoever else runs (the disk test is TestQuietVerdict's).
	noDisk := func() (uint64, error) { return 0, nil }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, busyUntil := burn(300 * time.Millisecond)
	q := NewQuiet([]*Server{s}, true)
	q.disks = noDisk
	if got := q.Settle(ctx, "busy"); got.WaitNs > int64(200*time.Millisecond) || got.TimedOut != 0 {
		t.Errorf("a settle that leaves the busy server out waited %v (timed out: %d), want one quiet window", time.Duration(got.WaitNs), got.TimedOut)
	}
	got := q.Settle(ctx, "")
	if done := time.Now(); got.TimedOut != 0 || done.Before(busyUntil) {
		t.Errorf("a settle returned %v before the server stopped burning CPU (waited %v, timed out %d: %s)",
			busyUntil.Sub(done), time.Duration(got.WaitNs), got.TimedOut, got.Busy)
	}

	s2, _ := burn(5 * time.Second)
	q = NewQuiet([]*Server{s2}, true)
	q.disks = noDisk
	q.maxWait = 200 * time.Millisecond
	got = q.Settle(ctx, "")
	if got.TimedOut != 1 || !strings.Contains(got.Busy, "busy ran") || got.WaitNs > int64(time.Second) {
		t.Errorf("a settle bounded by 200ms beside a server burning CPU for 5s = %+v; want it to give up within a second, saying the server was busy", got)
	}
	q.budget = 0
	if got := q.Settle(ctx, ""); got.TimedOut != 1 || !strings.Contains(got.Busy, "budget") || got.WaitNs > int64(10*time.Millisecond) {
		t.Errorf("a settle after the budget was spent = %+v; want it to give up at once", got)
	}
	if n, outs, _ := q.Stats(); n != 2 || outs != 2 {
		t.Errorf("Stats = %d settles, %d timed out; want 2, 2", n, outs)
	}
	if got := NewQuiet([]*Server{s2}, false).Settle(ctx, ""); got.Settles != 0 || got.WaitNs != 0 {
		t.Errorf("a Quiet that only watches settled: %+v", got)
	}
	if (*Quiet)(nil).Settle(ctx, "") != (SettleWait{}) {
		t.Error("a nil Quiet settled")
	}
}

// TestWatchCountsBusyServer checks that Watch reads what a busy server
// did in between.
func TestWatchCountsBusyServer(t *testing.T) {
	if !hasSchedstat() {
		t.Skip("no /proc/<pid>/schedstat")
	}
	pid := startBurner(t, 2*time.Second)
	q := NewQuiet([]*Server{{ID: "busy", PID: pid}}, false)
	end := q.Watch("")
	time.Sleep(200 * time.Millisecond)
	// On a busy machine the process gets a share of a core only.
	if b := end(); b.CPUNs < int64(10*time.Millisecond) {
		t.Errorf("Watch over 200ms of a process burning CPU = %+v; want at least 10ms of CPU", b)
	}
	end = q.Watch("busy")
	time.Sleep(100 * time.Millisecond)
	if b := end(); b.CPUNs != 0 || b.OwnCPUNs < int64(5*time.Millisecond) {
		t.Errorf("Watch with the busy server under test = %+v; want its CPU as its own, none as the others'", b)
	}
}

func TestParsePressure(t *testing.T) {
	in := "some avg10=62.25 avg60=61.12 avg300=63.18 total=791315352\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"
	if got, ok := parsePressure(in); got != 791315352 || !ok {
		t.Errorf("parsePressure = %d, %v; want the some total 791315352, true", got, ok)
	}
	if got, ok := parsePressure("full total=7\n"); got != 0 || ok {
		t.Errorf("parsePressure without some = %d, %v; want 0, false", got, ok)
	}
}

// startBurner starts this test binary as a process that burns CPU for d
// (then sleeps until the test ends) and returns its PID once it burns.
func startBurner(t *testing.T, d time.Duration) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSettleWaitsForBusyServer$")
	cmd.Env = append(os.Environ(), burnEnv+"="+d.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "burning\n" {
		t.Fatalf("the burning process said %q, %v", line, err)
	}
	return cmd.Process.Pid
}
