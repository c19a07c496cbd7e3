package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/childproc"
	"github.com/dlock-go/dlock/internal/testenv"
)

// The tests run the built dlock binary (dlockBin) against real servers.
// COMMAND is this test binary re-executed as a helper (see jobMain),
// configured through environment variables that dlock passes through.
var dlockBin string

// Environment of the helper COMMAND.
const (
	envHelper = "DLOCK_CMDTEST_HELPER" // set: run as the helper, not as tests
	envDir    = "JOB_DIR"              // where the job writes its records
	envID     = "JOB_ID"               // the job's name in those records
	envHold   = "JOB_HOLD"             // how long to run; default: until JOB_DIR/stop exists
	envOnSig  = "JOB_ONSIG"            // on SIGINT/SIGTERM: "exit" (status 0, the default), "die" (of it), "ignore"
	envExit   = "JOB_EXIT"             // exit status when done
	envSlots  = "JOB_SLOTS"            // jobs that may run at once (default 1): a semaphore's permits
)

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) != "" {
		os.Exit(jobMain())
	}
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dlock-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	dlockBin = filepath.Join(dir, "dlock")
	args := []string{"build", "-o", dlockBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", append(args, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return testenv.Run(m)
}

// jobMain is the helper COMMAND: it records its environment and its start
// in JOB_DIR, detects an overlap with another job (one of JOB_SLOTS marker
// files, created with O_EXCL: an overlap is a job that finds every one
// taken), runs until JOB_HOLD passes or JOB_DIR/stop appears, records the
// signals it gets, and exits with JOB_EXIT.
func jobMain() int {
	dir, id := os.Getenv(envDir), os.Getenv(envID)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	record := func(file, line string) {
		f, err := os.OpenFile(filepath.Join(dir, file), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
	env := fmt.Sprintf("%s=%s\n%s=%s\n%s=%s", envName, os.Getenv(envName), envToken, os.Getenv(envToken), envURL, os.Getenv(envURL))
	if p, ok := os.LookupEnv(envPermits); ok {
		env += "\n" + envPermits + "=" + p
	}
	record("env."+id, env)
	slots, _ := strconv.Atoi(os.Getenv(envSlots))
	inside := ""
	for k := range max(slots, 1) {
		marker := filepath.Join(dir, "inside")
		if k > 0 {
			marker += "." + strconv.Itoa(k)
		}
		if f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			f.Close()
			inside = marker
			break
		}
	}
	if inside == "" {
		record("overlap", id)
		return 99
	}
	record("log", fmt.Sprintf("start %s %d %s", id, time.Now().UnixNano(), os.Getenv(envToken)))
	record("started."+id, strconv.Itoa(os.Getpid()))

	var until <-chan time.Time
	if d, err := time.ParseDuration(os.Getenv(envHold)); err == nil {
		until = time.After(d)
	}
	// A job that outlives its test (a dlock that failed to take it along)
	// ends by itself.
	orphanLimit := time.After(3 * time.Minute)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	done := func() int {
		os.Remove(inside)
		record("log", fmt.Sprintf("end %s %d", id, time.Now().UnixNano()))
		code, _ := strconv.Atoi(os.Getenv(envExit))
		return code
	}
	for {
		select {
		case <-until:
			return done()
		case <-orphanLimit:
			record("overlived", id)
			return 97
		case <-poll.C:
			if until == nil {
				if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
					return done()
				}
			}
		case sig := <-sigs:
			record("sig."+id, sig.String())
			record("sigtime."+id, strconv.FormatInt(time.Now().UnixNano(), 10))
			if sig != syscall.SIGINT && sig != syscall.SIGTERM {
				continue // USR1, USR2, HUP: recorded only
			}
			switch os.Getenv(envOnSig) {
			case "ignore":
			case "die":
				os.Remove(inside)
				signal.Reset()
				syscall.Kill(os.Getpid(), sig.(syscall.Signal))
				time.Sleep(time.Second)
				return 98
			default:
				return done()
			}
		}
	}
}

// jobEnv returns the environment for a helper COMMAND with id, writing
// into dir; kv are extra JOB_* settings.
func jobEnv(dir, id string, kv ...string) []string {
	env := append(os.Environ(), envHelper+"=1", envDir+"="+dir, envID+"="+id)
	return append(env, kv...)
}

// jobCommand is the COMMAND part of a dlock run command line.
func jobCommand() []string {
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return []string{"--", self}
}

// dlockProc is one running dlock.
type dlockProc struct {
	cmd    *exec.Cmd
	stderr *childproc.Buffer
	stdout *childproc.Buffer
	done   chan struct{}
	code   int
}

// startDlock starts dlock with args and env (nil: this process's own,
// without DLOCK_URL). ctx bounds its life.
func startDlock(t *testing.T, ctx context.Context, env []string, args ...string) *dlockProc {
	t.Helper()
	cmd := exec.CommandContext(ctx, dlockBin, args...)
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = withoutVar(env, envURL)
	if u, ok := lookupVar(env, envURL); ok {
		cmd.Env = append(cmd.Env, envURL+"="+u)
	}
	// COMMAND inherits dlock's output pipes: when dlock dies without it,
	// Wait must not wait for COMMAND to close them.
	cmd.WaitDelay = 2 * time.Second
	p := &dlockProc{cmd: cmd, stderr: new(childproc.Buffer), stdout: new(childproc.Buffer), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dlock: %v", err)
	}
	go func() {
		err := cmd.Wait()
		p.code = exitStatus(err)
		if err != nil && !errors.As(err, new(*exec.ExitError)) {
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if strings.Contains(p.stderr.String()+p.stdout.String(), testenv.Password) {
			t.Errorf("dlock %s printed the password", strings.Join(args, " "))
		}
	})
	return p
}

// wait waits for dlock to exit (at most d) and returns its status.
func (p *dlockProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("dlock %s did not exit within %v; stderr:\n%s", strings.Join(p.cmd.Args[1:], " "), d, p.stderr.String())
		return -1
	}
}

// exited reports whether dlock has exited.
func (p *dlockProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// runDlock runs dlock to completion (bounded by ctx) and returns its exit
// status, standard output and standard error.
func runDlock(t *testing.T, ctx context.Context, env []string, args ...string) (int, string, string) {
	t.Helper()
	p := startDlock(t, ctx, env, args...)
	d := time.Minute
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	code := p.wait(t, d)
	return code, p.stdout.String(), p.stderr.String()
}

func withoutVar(env []string, key string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func lookupVar(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// waitFile waits until path exists and returns its content.
func waitFile(t *testing.T, ctx context.Context, path string) string {
	t.Helper()
	return waitFileOr(t, ctx, path, nil)
}

// waitStarted waits until dlock's COMMAND (the helper job id) has started
// and returns the job's pid; it fails at once when dlock exits first.
func (p *dlockProc) waitStarted(t *testing.T, ctx context.Context, dir, id string) string {
	t.Helper()
	return waitFileOr(t, ctx, filepath.Join(dir, "started."+id), p)
}

func waitFileOr(t *testing.T, ctx context.Context, path string, p *dlockProc) string {
	t.Helper()
	var exited <-chan struct{}
	if p != nil {
		exited = p.done
	}
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not appear: %v", filepath.Base(path), ctx.Err())
		case <-exited:
			if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
				return string(b)
			}
			t.Fatalf("dlock exited with status %d before %s appeared; stderr %q", p.code, filepath.Base(path), p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// oneLineMsg checks that stderr is exactly one line starting "dlock: " and
// mentioning want.
func oneLineMsg(t *testing.T, stderr, want string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "dlock: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) {
		t.Errorf("stderr = %q, want one line \"dlock: ...%s...\"", stderr, want)
	}
}
