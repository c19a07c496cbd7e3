package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// backend is one lock service the command is tested against: a row of
// the backend table (internal/backendtest) with one of its strategies.
type backend struct {
	name     string
	kit      *backendtest.Backend
	strategy string // "" for the default: the URL has no strategy parameter
	// ttl is the -ttl of the crash and lost-lease cases: short, so that
	// TTL-bound backends free a crashed holder's lock quickly.
	ttl time.Duration
}

// backends are Redis, Redlock, ZooKeeper and each SQL backend with each
// strategy: forupdate (the default: a row lock in an open transaction),
// version (a lease row with a server-side expiry) and the native lock (an
// advisory lock, GET_LOCK), held by a connection. ZooKeeper runs its
// default recipe.
func backends() []backend {
	var out []backend
	for _, name := range []string{"redis", "redlock", "zookeeper", "postgres", "mysql", "etcd"} {
		kb := backendtest.Lookup(name)
		if kb.Param != "strategy" {
			out = append(out, backend{name: name, kit: kb, ttl: 2 * time.Second})
			continue
		}
		for i, s := range kb.Strategies {
			b := backend{name: name + "-" + s, kit: kb, strategy: s, ttl: 2 * time.Second}
			if i == 0 {
				b.strategy = ""
			}
			out = append(out, b)
		}
	}
	return out
}

// envOptions: a 2s ZooKeeper session, so that a crashed holder's node goes
// 2s after its last ping.
var envOptions = &backendtest.Options{SessionTimeout: 2 * time.Second}

// fixture is one backend's servers, URL and hooks, for the cases.
type fixture struct {
	b     backend
	env   *backendtest.Env
	url   string
	hooks *backendtest.Hooks
}

// revoke drops the current lease of name behind its holder's back, as the
// server would (the fault of the lost-lease cases).
func (f *fixture) revoke(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if err := f.hooks.Revoke(ctx, name); err != nil {
		t.Fatalf("revoke: %v", err)
	}
}

var lockSeq atomic.Int64

// lockName returns a name no other test uses.
func (f *fixture) lockName(t *testing.T) string {
	return fmt.Sprintf("cmdtest/%s/%d-%d", strings.ReplaceAll(t.Name(), "/", "."), os.Getpid(), lockSeq.Add(1))
}

// start starts "dlock run -url URL flags NAME -- helper" with the helper
// writing to dir as id; jobKV are JOB_* settings.
func (f *fixture) start(t *testing.T, ctx context.Context, name, dir, id string, jobKV []string, flags ...string) *dlockProc {
	t.Helper()
	args := append([]string{"run", "-url", f.url}, flags...)
	args = append(append(args, name), jobCommand()...)
	return startDlock(t, ctx, jobEnv(dir, id, jobKV...), args...)
}

// status runs "dlock status -json" on name.
func (f *fixture) status(t *testing.T, ctx context.Context, name string) statusReport {
	t.Helper()
	code, stdout, stderr := runDlock(t, ctx, nil, "status", "-json", "-url", f.url, name)
	if code != 0 {
		t.Fatalf("dlock status: status %d, stderr %q", code, stderr)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("dlock status -json: %v\n%s", err, stdout)
	}
	return rep
}

// caps returns the backend's capabilities for the URL.
func (f *fixture) caps(t *testing.T, ctx context.Context) dlock.Capabilities {
	t.Helper()
	l, err := dlock.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Capabilities()
}

// canInspect reports whether the backend implements Locker.Inspect.
func (f *fixture) canInspect(t *testing.T, ctx context.Context) bool {
	t.Helper()
	l, err := dlock.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.Inspect(ctx, "cmdtest/probe")
	if err != nil && !errors.Is(err, dlock.ErrUnsupported) {
		t.Fatal(err)
	}
	if err != nil {
		t.Logf("%s cannot inspect locks: dlock status reports unknowns", f.b.name)
	}
	return err == nil
}

// crashBound is how long after its holder died the lock is free at the
// latest, by the backend's own declaration.
func (f *fixture) crashBound(t *testing.T, ctx context.Context) time.Duration {
	switch d := f.caps(t, ctx).ReleaseOnCrash; d {
	case driver.ReleaseAfterTTL:
		return f.b.ttl
	default:
		return d
	}
}

// slack absorbs scheduling noise on a loaded machine in the time bounds.
const slack = 5 * time.Second

func TestBackends(t *testing.T) {
	cases := []struct {
		name string
		f    func(t *testing.T, f *fixture)
	}{
		{"NoWaitRace", testNoWaitRace},
		{"WaitSerializes", testWaitSerializes},
		{"WaitTimeoutAndInterrupt", testWaitTimeoutAndInterrupt},
		{"ExitStatusAndEnv", testExitStatusAndEnv},
		{"SignalsForwarded", testSignalsForwarded},
		{"Status", testStatus},
		{"LostLeaseTerminates", testLostLeaseTerminates},
		{"LostLeaseKillsAfterGrace", testLostLeaseKillsAfterGrace},
		{"CrashFreesLock", testCrashFreesLock},
		{"Unreachable", testUnreachable},
		{"Semaphore", testSemaphore},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			// Backends run side by side (-parallel, GOMAXPROCS by default):
			// every case uses its own lock names and every fault hook hits
			// only the holder of its name.
			t.Parallel()
			if !slices.Contains(dlock.Schemes(), b.kit.Scheme) {
				t.Fatalf("scheme %s is not compiled into dlock (drivers.go)", b.kit.Scheme)
			}
			env := b.kit.Shared(t, envOptions)
			f := &fixture{b: b, env: env, url: env.URL(b.strategy)}
			f.hooks = env.Hooks(f.url)
			t.Cleanup(func() { f.hooks.Close() })
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.f(t, f) })
			}
		})
	}
}

// testNoWaitRace: two "dlock run -no-wait" at once: exactly one runs
// COMMAND, the other exits 75 at once with a one-line message.
func testNoWaitRace(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, time.Minute)
	dir, name := t.TempDir(), f.lockName(t)
	procs := map[string]*dlockProc{
		"a": f.start(t, ctx, name, dir, "a", nil, "-no-wait"),
		"b": f.start(t, ctx, name, dir, "b", nil, "-no-wait"),
	}
	var loser string
	select {
	case <-procs["a"].done:
		loser = "a"
	case <-procs["b"].done:
		loser = "b"
	case <-ctx.Done():
		t.Fatal("neither dlock -no-wait exited: both running COMMAND?")
	}
	winner := map[string]string{"a": "b", "b": "a"}[loser]
	if code := procs[loser].code; code != exitBusy {
		t.Fatalf("first dlock to exit (%s): status %d, want %d (busy); stderr %q", loser, code, exitBusy, procs[loser].stderr)
	}
	oneLineMsg(t, procs[loser].stderr.String(), fmt.Sprintf("lock %q is busy", name))
	procs[winner].waitStarted(t, ctx, dir, winner)
	if fileExists(filepath.Join(dir, "started."+loser)) {
		t.Errorf("the busy dlock (%s) ran COMMAND too", loser)
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := procs[winner].wait(t, time.Until(deadline(ctx))); code != 0 {
		t.Errorf("winner: status %d, want 0; stderr %q", code, procs[winner].stderr)
	}
	if fileExists(filepath.Join(dir, "overlap")) {
		t.Error("two COMMANDs overlapped")
	}
	// Released: the next -no-wait gets it at once.
	c := f.start(t, ctx, name, dir, "c", []string{envHold + "=0s"}, "-no-wait")
	if code := c.wait(t, time.Until(deadline(ctx))); code != 0 {
		t.Errorf("after release: status %d, want 0; stderr %q", code, c.stderr)
	}
}

// testWaitSerializes: dlocks that wait run COMMAND one after the other,
// never overlapping, and each gets a larger fencing token.
func testWaitSerializes(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, 2*time.Minute)
	dir, name := t.TempDir(), f.lockName(t)
	ids := []string{"a", "b", "c"}
	var procs []*dlockProc
	for _, id := range ids {
		procs = append(procs, f.start(t, ctx, name, dir, id, []string{envHold + "=300ms"}, "-wait", "90s"))
	}
	for i, p := range procs {
		if code := p.wait(t, time.Until(deadline(ctx))); code != 0 {
			t.Errorf("dlock %s: status %d, want 0; stderr %q", ids[i], code, p.stderr)
		}
	}
	if fileExists(filepath.Join(dir, "overlap")) {
		t.Fatal("two COMMANDs overlapped")
	}
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	// The log must read start X, end X, start Y, end Y, ... with times
	// increasing and tokens increasing from one start to the next.
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	if len(lines) != 2*len(ids) {
		t.Fatalf("log has %d lines, want %d:\n%s", len(lines), 2*len(ids), log)
	}
	fencing := f.caps(t, ctx).Fencing
	var lastTime, lastToken int64
	for i := 0; i < len(lines); i += 2 {
		s, e := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(s) != 4 || s[0] != "start" || len(e) != 3 || e[0] != "end" || s[1] != e[1] {
			t.Fatalf("log is not start/end pairs:\n%s", log)
		}
		st, _ := strconv.ParseInt(s[2], 10, 64)
		et, _ := strconv.ParseInt(e[2], 10, 64)
		tok, _ := strconv.ParseInt(s[3], 10, 64)
		if st < lastTime || et < st {
			t.Errorf("intervals overlap or go backwards:\n%s", log)
		}
		if fencing && tok <= lastToken {
			t.Errorf("token %d of %s is not above the previous holder's %d", tok, s[1], lastToken)
		}
		lastTime, lastToken = et, tok
	}
}

// testWaitTimeoutAndInterrupt: -wait D gives up with 75 after D; a signal
// ends a waiting dlock with 128+N; neither runs COMMAND.
func testWaitTimeoutAndInterrupt(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, time.Minute)
	dir, name := t.TempDir(), f.lockName(t)
	holder := f.start(t, ctx, name, dir, "holder", nil)
	holder.waitStarted(t, ctx, dir, "holder")

	t0 := time.Now()
	code, _, stderr := runDlock(t, ctx, jobEnv(dir, "timeout"), append([]string{"run", "-url", f.url, "-wait", "700ms", name}, jobCommand()...)...)
	if elapsed := time.Since(t0); code != exitBusy || elapsed < 700*time.Millisecond {
		t.Errorf("-wait 700ms: status %d after %v, want %d after at least 700ms; stderr %q", code, elapsed, exitBusy, stderr)
	}
	oneLineMsg(t, stderr, fmt.Sprintf("gave up waiting for lock %q after 700ms", name))

	w := f.start(t, ctx, name, dir, "interrupted", nil)
	time.Sleep(500 * time.Millisecond) // let it connect and wait
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t, 15*time.Second); code != 128+int(syscall.SIGINT) {
		t.Errorf("SIGINT while waiting: status %d, want %d; stderr %q", code, 128+int(syscall.SIGINT), w.stderr)
	}
	oneLineMsg(t, w.stderr.String(), "interrupted by interrupt while waiting")
	for _, id := range []string{"timeout", "interrupted"} {
		if fileExists(filepath.Join(dir, "started."+id)) {
			t.Errorf("dlock %s ran COMMAND", id)
		}
	}
	if holder.exited() {
		t.Fatalf("holder exited early: status %d, stderr %q", holder.code, holder.stderr)
	}
	os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
	if code := holder.wait(t, time.Until(deadline(ctx))); code != 0 {
		t.Errorf("holder: status %d; stderr %q", code, holder.stderr)
	}
}

// testExitStatusAndEnv: COMMAND's status is dlock's; COMMAND sees
// DLOCK_NAME, DLOCK_TOKEN and DLOCK_URL without the password.
func testExitStatusAndEnv(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, time.Minute)
	dir, name := t.TempDir(), f.lockName(t)
	for _, want := range []int{0, 1, 42} {
		id := fmt.Sprint("exit", want)
		p := f.start(t, ctx, name, dir, id, []string{envHold + "=0s", envExit + "=" + fmt.Sprint(want)}, "-no-wait")
		if code := p.wait(t, time.Until(deadline(ctx))); code != want {
			t.Errorf("COMMAND exited %d: dlock status %d; stderr %q", want, code, p.stderr)
		}
		if s := p.stderr.String(); s != "" {
			t.Errorf("COMMAND exited %d: dlock printed %q", want, s)
		}
	}
	env := waitFile(t, ctx, filepath.Join(dir, "env.exit42"))
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(env), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	if vars[envName] != name {
		t.Errorf("DLOCK_NAME = %q, want %q", vars[envName], name)
	}
	if tok, err := strconv.ParseUint(vars[envToken], 10, 64); err != nil || tok == 0 {
		t.Errorf("DLOCK_TOKEN = %q, want a positive integer", vars[envToken])
	}
	if vars[envURL] != driver.Redact(f.url) || strings.Contains(vars[envURL], testenv.Password) {
		t.Errorf("DLOCK_URL = %q, want %q (no password)", vars[envURL], driver.Redact(f.url))
	}
	// A status of 128+N for a COMMAND killed by signal N.
	code, _, stderr := runDlock(t, ctx, nil, "run", "-url", f.url, "-no-wait", name, "--", "sh", "-c", "kill -TERM $$")
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("COMMAND killed by SIGTERM: status %d, want 143; stderr %q", code, stderr)
	}
}

// testSignalsForwarded: signals to dlock reach COMMAND; the lock is
// released once COMMAND has exited.
func testSignalsForwarded(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, time.Minute)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir, name := t.TempDir(), f.lockName(t)
		p := f.start(t, ctx, name, dir, "job", []string{envOnSig + "=die"})
		p.waitStarted(t, ctx, dir, "job")
		// USR1 is recorded and ignored by the job; then sig kills it.
		p.cmd.Process.Signal(syscall.SIGUSR1)
		for !strings.Contains(readFile(filepath.Join(dir, "sig.job")), syscall.SIGUSR1.String()) {
			if ctx.Err() != nil {
				t.Fatalf("SIGUSR1 not forwarded to COMMAND")
			}
			time.Sleep(10 * time.Millisecond)
		}
		p.cmd.Process.Signal(sig)
		if code := p.wait(t, 15*time.Second); code != 128+int(sig) {
			t.Errorf("%v to dlock: status %d, want %d; stderr %q", sig, code, 128+int(sig), p.stderr)
		}
		if got := readFile(filepath.Join(dir, "sig.job")); !strings.Contains(got, sig.String()) {
			t.Errorf("COMMAND's signals: %q, want %v", got, sig)
		}
		// Released after COMMAND exited.
		q := f.start(t, ctx, name, dir, "next", []string{envHold + "=0s"}, "-no-wait")
		if code := q.wait(t, time.Until(deadline(ctx))); code != 0 {
			t.Errorf("after %v: next -no-wait status %d, want 0; stderr %q", sig, code, q.stderr)
		}
	}
}

// testStatus: dlock status tells a held lock from a free one and, where
// the backend knows, the holder and the fence; every SQL strategy knows
// both, and its busy message names the holder.
func testStatus(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, time.Minute)
	dir, name := t.TempDir(), f.lockName(t)
	sql := f.b.kit.Param == "strategy"
	if !f.canInspect(t, ctx) {
		if sql {
			t.Fatalf("%s cannot inspect locks: every SQL strategy must", f.b.name)
		}
		// dlock status must say that nothing is known, and not fail.
		code, text, stderr := runDlock(t, ctx, nil, "status", "-url", f.url, name)
		if rep := f.status(t, ctx, name); code != 0 || rep.Held != nil || !strings.Contains(text, "held:    unknown (this backend cannot inspect") {
			t.Errorf("backend without Inspect: status %d, held %s, text %q, stderr %q", code, ptrStr(rep.Held), text, stderr)
		}
		return
	}
	if rep := f.status(t, ctx, name); rep.Held == nil || *rep.Held {
		t.Errorf("before: held = %v, want false", ptrStr(rep.Held))
	}
	p := f.start(t, ctx, name, dir, "job", nil)
	p.waitStarted(t, ctx, dir, "job")
	env := readFile(filepath.Join(dir, "env.job"))
	rep := f.status(t, ctx, name)
	if rep.Held == nil || !*rep.Held {
		t.Errorf("while held: held = %v, want true", ptrStr(rep.Held))
	}
	if rep.Owner != nil && !strings.HasSuffix(*rep.Owner, fmt.Sprintf("/%d", p.cmd.Process.Pid)) {
		t.Errorf("owner = %q, want host/%d", *rep.Owner, p.cmd.Process.Pid)
	}
	if rep.Fence != nil && !strings.Contains(env, fmt.Sprintf("%s=%d\n", envToken, *rep.Fence)) {
		t.Errorf("fence = %d, COMMAND's environment:\n%s", *rep.Fence, env)
	}
	t.Logf("status while held: held=%s owner=%s ttl_ms=%s fence=%s waiters=%s",
		ptrStr(rep.Held), ptrStr(rep.Owner), ptrStr(rep.TTLMillis), ptrStr(rep.Fence), ptrStr(rep.Waiters))
	if sql {
		if rep.Owner == nil || rep.Fence == nil {
			t.Errorf("SQL strategy: owner %s, fence %s while held, want both known", ptrStr(rep.Owner), ptrStr(rep.Fence))
		}
		if f.caps(t, ctx).Wait == driver.WaitQueue && (rep.Waiters == nil || *rep.Waiters != 0) {
			t.Errorf("SQL strategy with a server queue: waiters %s, want 0", ptrStr(rep.Waiters))
		}
	}
	if rep.Owner != nil {
		// The busy message names the holder.
		code, _, stderr := runDlock(t, ctx, nil, "run", "-url", f.url, "-no-wait", name, "--", "true")
		want := fmt.Sprintf("lock %q is busy (held by %s", name, *rep.Owner)
		if code != exitBusy || !strings.Contains(stderr, want) {
			t.Errorf("-no-wait while held: status %d, stderr %q, want %d and %q", code, stderr, exitBusy, want)
		}
	}
	code, text, stderr := runDlock(t, ctx, nil, "status", "-url", f.url, name)
	if code != 0 || !strings.Contains(text, "held:    yes") {
		t.Errorf("dlock status: %d, %q, stderr %q", code, text, stderr)
	}
	os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
	if code := p.wait(t, time.Until(deadline(ctx))); code != 0 {
		t.Errorf("holder: status %d; stderr %q", code, p.stderr)
	}
	if rep := f.status(t, ctx, name); rep.Held == nil || *rep.Held {
		t.Errorf("after: held = %v, want false", ptrStr(rep.Held))
	}
}

// testLostLeaseTerminates: when the server drops the lease, COMMAND gets
// SIGTERM and dlock exits 76 saying the lock was lost.
func testLostLeaseTerminates(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, time.Minute)
	dir, name := t.TempDir(), f.lockName(t)
	p := f.start(t, ctx, name, dir, "job", []string{envOnSig + "=exit"}, "-ttl", f.b.ttl.String(), "-grace", "20s")
	p.waitStarted(t, ctx, dir, "job")
	t0 := time.Now()
	f.revoke(t, ctx, name)
	code := p.wait(t, time.Until(deadline(ctx)))
	elapsed := time.Since(t0)
	if code != exitLost {
		t.Fatalf("status %d, want %d (lost); stderr %q", code, exitLost, p.stderr)
	}
	if got := readFile(filepath.Join(dir, "sig.job")); strings.TrimSpace(got) != syscall.SIGTERM.String() {
		t.Errorf("COMMAND's signals: %q, want only SIGTERM", got)
	}
	stderr := p.stderr.String()
	if !strings.Contains(stderr, fmt.Sprintf("lock %q lost while COMMAND was running", name)) || !strings.Contains(stderr, "was lost; COMMAND was terminated") {
		t.Errorf("stderr = %q, want it to say the lock was lost", stderr)
	}
	if strings.Contains(stderr, "SIGKILL\n") {
		t.Errorf("COMMAND exited on SIGTERM, yet dlock sent SIGKILL: %q", stderr)
	}
	// Noticed within a refresh interval (TTL/3) or the driver's loss signal.
	if bound := f.b.ttl + slack; elapsed > bound {
		t.Errorf("loss noticed after %v, want within %v", elapsed, bound)
	}
	t.Logf("loss noticed and COMMAND terminated %v after the revoke", elapsed.Round(time.Millisecond))
}

// testLostLeaseKillsAfterGrace: a COMMAND that ignores SIGTERM gets
// SIGKILL -grace later.
func testLostLeaseKillsAfterGrace(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, time.Minute)
	dir, name := t.TempDir(), f.lockName(t)
	const grace = 700 * time.Millisecond
	p := f.start(t, ctx, name, dir, "job", []string{envOnSig + "=ignore"}, "-ttl", f.b.ttl.String(), "-grace", grace.String())
	pid := p.waitStarted(t, ctx, dir, "job")
	f.revoke(t, ctx, name)
	code := p.wait(t, time.Until(deadline(ctx)))
	exitedAt := time.Now() // at or after dlock's exit
	if code != exitLost {
		t.Fatalf("status %d, want %d (lost); stderr %q", code, exitLost, p.stderr)
	}
	// The job recorded when it got SIGTERM (at or after it was sent); the
	// SIGKILL came -grace after the send. Half the grace absorbs the job's
	// own delay on a loaded machine and still catches a SIGKILL sent at once.
	termNanos, err := strconv.ParseInt(strings.TrimSpace(readFile(filepath.Join(dir, "sigtime.job"))), 10, 64)
	if err != nil {
		t.Fatalf("COMMAND did not record a SIGTERM: %v", err)
	}
	if d := exitedAt.Sub(time.Unix(0, termNanos)); d < grace/2 {
		t.Errorf("killed %v after SIGTERM, want about -grace %v", d, grace)
	}
	if !strings.Contains(p.stderr.String(), "sending SIGKILL") {
		t.Errorf("stderr = %q, want it to say SIGKILL was sent", p.stderr)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(pid)); alive(n) {
		t.Errorf("COMMAND (pid %d) still alive", n)
	}
}

// testCrashFreesLock: a holder dlock killed with SIGKILL takes COMMAND
// with it (Linux), and the lock is free within the backend's bound.
func testCrashFreesLock(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, 2*time.Minute)
	dir, name := t.TempDir(), f.lockName(t)
	bound := f.crashBound(t, ctx)
	p := f.start(t, ctx, name, dir, "holder", nil, "-ttl", f.b.ttl.String())
	pid, _ := strconv.Atoi(strings.TrimSpace(p.waitStarted(t, ctx, dir, "holder")))
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	p.wait(t, 10*time.Second)
	for alive(pid) {
		if time.Since(t0) > 10*time.Second {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("COMMAND (pid %d) outlived its dlock by 10s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	os.Remove(filepath.Join(dir, "inside")) // the killed COMMAND's overlap marker
	q := f.start(t, ctx, name, dir, "next", []string{envHold + "=0s"}, "-wait", (bound + 2*slack).String())
	q.waitStarted(t, ctx, dir, "next")
	elapsed := time.Since(t0)
	if code := q.wait(t, time.Until(deadline(ctx))); code != 0 {
		t.Fatalf("next: status %d; stderr %q", code, q.stderr)
	}
	if elapsed > bound+slack {
		t.Errorf("lock free %v after its holder died, want within the backend's bound %v (+%v)", elapsed, bound, slack)
	}
	t.Logf("lock free %v after its holder was killed (declared bound %v)", elapsed.Round(time.Millisecond), bound)
}

// testUnreachable: a service that cannot be reached or refuses the
// credentials gives status 69 and one line without the password.
func testUnreachable(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, time.Minute)
	bad := f.url
	for i, a := range f.env.Upstreams {
		bad = strings.Replace(bad, a, fmt.Sprintf("127.0.0.1:%d", i+1), 1)
	}
	code, _, stderr := runDlock(t, ctx, nil, "run", "-url", bad, "-no-wait", f.lockName(t), "--", "true")
	if code != exitUnavailable {
		t.Errorf("unreachable: status %d, want %d; stderr %q", code, exitUnavailable, stderr)
	}
	oneLineMsg(t, stderr, "")
	if strings.Contains(stderr, testenv.Password) {
		t.Errorf("stderr shows the password: %q", stderr)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// alive reports whether pid runs (a zombie is dead; one left to this
// process, the child subreaper testenv makes it, is reaped here).
func alive(pid int) bool {
	var ws syscall.WaitStatus
	if wpid, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid {
		return false
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return false
		}
		return true
	}
	return syscall.Kill(pid, 0) == nil
}

func deadline(ctx context.Context) time.Time {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Now().Add(time.Minute)
	}
	return dl
}

func ptrStr[T any](p *T) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// testSemaphore: "dlock run -n N" runs at most N COMMANDs at once, each
// with a token of its own, larger than that of every permit released
// before it was granted; with every permit held, -no-wait exits 75 and
// another -n exits 64, and neither runs COMMAND. A backend without
// semaphores refuses -n with a usage error.
func testSemaphore(t *testing.T, f *fixture) {
	ctx := testenv.Context(t, time.Minute)
	dir, name := t.TempDir(), f.lockName(t)
	const permits, jobs = 2, 5
	n := strconv.Itoa(permits)
	if f.caps(t, ctx).MaxPermits == 0 {
		code, _, stderr := runDlock(t, ctx, jobEnv(dir, "nosem"), append([]string{"run", "-url", f.url, "-n", n, name}, jobCommand()...)...)
		if code != exitUsage {
			t.Errorf("-n on a backend without semaphores: status %d, want %d; stderr %q", code, exitUsage, stderr)
		}
		oneLineMsg(t, stderr, "has no semaphores")
		if fileExists(filepath.Join(dir, "started.nosem")) {
			t.Error("COMMAND ran")
		}
		return
	}
	slots := envSlots + "=" + n

	// Every permit held (until "stop"): a third -no-wait is busy, and
	// another number of permits is refused.
	var holders []*dlockProc
	for _, id := range []string{"h0", "h1"} {
		p := f.start(t, ctx, name, dir, id, []string{slots}, "-n", n)
		p.waitStarted(t, ctx, dir, id)
		holders = append(holders, p)
	}
	code, _, stderr := runDlock(t, ctx, jobEnv(dir, "busy", slots), append([]string{"run", "-url", f.url, "-n", n, "-no-wait", name}, jobCommand()...)...)
	if code != exitBusy {
		t.Errorf("-no-wait with every permit held: status %d, want %d; stderr %q", code, exitBusy, stderr)
	}
	oneLineMsg(t, stderr, fmt.Sprintf("semaphore %q is busy: all %d permits are held; COMMAND not run", name, permits))
	code, _, stderr = runDlock(t, ctx, jobEnv(dir, "other-n", slots), append([]string{"run", "-url", f.url, "-n", "3", "-no-wait", name}, jobCommand()...)...)
	if code != exitUsage {
		t.Errorf("-n 3 on a semaphore held with -n 2: status %d, want %d; stderr %q", code, exitUsage, stderr)
	}
	oneLineMsg(t, stderr, "-n must agree with the semaphore's holders")
	for _, id := range []string{"busy", "other-n"} {
		if fileExists(filepath.Join(dir, "started."+id)) {
			t.Errorf("dlock %s ran COMMAND", id)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, p := range holders {
		if code := p.wait(t, time.Until(deadline(ctx))); code != 0 {
			t.Errorf("holder %d: status %d, want 0; stderr %q", i, code, p.stderr)
		}
	}

	// jobs dlocks that wait: at most permits at once, all of them run.
	dir = t.TempDir()
	var procs []*dlockProc
	for i := range jobs {
		procs = append(procs, f.start(t, ctx, name, dir, fmt.Sprint("j", i), []string{slots, envHold + "=500ms"}, "-n", n, "-wait", "50s"))
	}
	for i, p := range procs {
		if code := p.wait(t, time.Until(deadline(ctx))); code != 0 {
			t.Errorf("dlock j%d: status %d, want 0; stderr %q", i, code, p.stderr)
		}
	}
	if fileExists(filepath.Join(dir, "overlap")) {
		t.Fatalf("more than %d COMMANDs ran at once", permits)
	}
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		start, end int64
		token      uint64
	}
	runs := map[string]*run{}
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		w := strings.Fields(line)
		if len(w) < 3 {
			t.Fatalf("bad log line %q", line)
		}
		at, _ := strconv.ParseInt(w[2], 10, 64)
		if runs[w[1]] == nil {
			runs[w[1]] = &run{}
		}
		switch r := runs[w[1]]; {
		case w[0] == "start" && len(w) == 4:
			r.start = at
			r.token, _ = strconv.ParseUint(w[3], 10, 64)
		case w[0] == "end":
			r.end = at
		default:
			t.Fatalf("bad log line %q", line)
		}
	}
	if len(runs) != jobs {
		t.Fatalf("%d jobs ran, want %d:\n%s", len(runs), jobs, log)
	}
	fencing := f.caps(t, ctx).Fencing
	most := 0
	for ida, a := range runs {
		at := 0 // runs, a included, under way when a started
		for idb, b := range runs {
			if b.start <= a.start && a.start < b.end {
				at++
			}
			if ida == idb || !fencing {
				continue
			}
			if a.token == b.token {
				t.Errorf("%s and %s have the same token %d", ida, idb, a.token)
			}
			// Every dlock asked at once; a job starts soon after its grant.
			// A job that started a whole hold (500ms) after b's job ended,
			// a second after b's started, was granted after b was: its
			// token is larger (unless starting a job took over a second).
			if b.end+int64(500*time.Millisecond) < a.start && a.token <= b.token {
				t.Errorf("%s (token %d) started well after %s (token %d) ended, with a token not above it", ida, a.token, idb, b.token)
			}
		}
		most = max(most, at)
	}
	if most > permits {
		t.Errorf("%d COMMANDs ran at once, want at most %d:\n%s", most, permits, log)
	}
	if most < 2 {
		// Not a failure of safety, but the semaphore behaved as a lock.
		t.Errorf("never two COMMANDs at once with %d permits and %d waiting jobs:\n%s", permits, jobs, log)
	}
}
