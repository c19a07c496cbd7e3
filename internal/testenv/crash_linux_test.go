//go:build linux

package testenv

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNoServerOutlivesCrashedBinary runs this test binary again as a child
// that starts Redis and PostgreSQL and is then SIGKILLed (as a test binary
// that panics or hits -timeout dies): every server process must go by
// itself, through the parent-death signal, without anyone killing it.
func TestNoServerOutlivesCrashedBinary(t *testing.T) {
	if os.Getenv("DLOCK_TESTENV_CRASH_CHILD") == "1" {
		crashChild()
		return
	}
	Require(t, KindRedis)
	Require(t, KindPostgres)
	becomeSubreaper() // orphans of the child come here, to be reaped
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNoServerOutlivesCrashedBinary$")
	cmd.Env = append(os.Environ(), "DLOCK_TESTENV_CRASH_CHILD=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				p, _ := strconv.Atoi(f)
				pids = append(pids, p)
			}
			break
		}
	}
	if len(pids) == 0 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("the child reported no server pids")
	}
	var tree []int
	for _, p := range pids {
		tree = append(tree, processTree(p)...)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	me := os.Getpid()
	for {
		var left []int
		tab := procTable()
		for _, p := range tree {
			if st, ok := tab[p]; ok {
				if st.ppid == me {
					var ws syscall.WaitStatus
					_, _ = syscall.Wait4(p, &ws, syscall.WNOHANG, nil)
				}
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			t.Logf("%d server processes went with the killed test binary", len(tree))
			sweepStale() // the child's directories: their owner is gone
			return
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("server processes %v outlived the killed test binary", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func crashChild() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := StartRedis(ctx, nil)
	if err != nil {
		panic(err)
	}
	p, err := StartPostgres(ctx, nil)
	if err != nil {
		panic(err)
	}
	os.Stdout.WriteString("PIDS " + strconv.Itoa(r.Pid()) + " " + strconv.Itoa(p.Pid()) + "\n")
	time.Sleep(time.Minute) // until killed
}
