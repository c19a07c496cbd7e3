package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// The environment variables COMMAND gets.
const (
	envName  = "DLOCK_NAME"
	envToken = "DLOCK_TOKEN"
	// envPermits (DLOCK_PERMITS) is the number of permits with -n.
	envPermits = "DLOCK_PERMITS"
	// envURL (DLOCK_URL) is shared with the input side; see main.go.
)

// Default flag values.
const (
	defaultGrace = 10 * time.Second
	// releaseTimeout bounds the release after COMMAND exits, and the
	// look-up of the holder for a "busy" message.
	releaseTimeout = 10 * time.Second
	inspectTimeout = 2 * time.Second
	// noWaitBudget bounds reaching the lock service with -no-wait (Open
	// and the one attempt): client libraries retry a refused connection
	// for seconds, which is no way to "not wait". A service on the same
	// network answers in milliseconds.
	noWaitBudget = time.Second
)

type runOpts struct {
	url     urlFlags
	ttl     time.Duration
	wait    time.Duration
	noWait  bool
	grace   time.Duration
	busy    int // exit status when the lock is busy (-E)
	verbose bool
	// permits is -n: 0 for the lock NAME, N for one of the N permits of
	// the semaphore NAME.
	permits int
}

// what names what dlock run takes, for its messages: lock "x", or a
// permit of semaphore "x".
func (o runOpts) what(name string) string {
	if o.permits > 0 {
		return fmt.Sprintf("a permit of semaphore %q", name)
	}
	return fmt.Sprintf("lock %q", name)
}

// newRunFlags returns the flag set of "dlock run" writing into o (which may
// be nil when only the defaults are printed).
func newRunFlags(o *runOpts) *flag.FlagSet {
	if o == nil {
		o = new(runOpts)
	}
	fs := flag.NewFlagSet("dlock run", flag.ContinueOnError)
	o.url.register(fs)
	durationVar(fs, &o.ttl, "ttl", dlock.DefaultTTL, "lease length `D`: a crashed holder's lock is freed after at most D on TTL-bound backends (Redis); the lease is renewed every D/3 while COMMAND runs")
	durationVar(fs, &o.wait, "wait", 0, "give up (status 75, or -E's) when the lock is not acquired within `D`, seconds (as flock -w) or a duration; also bounds reaching the lock service (default: wait as long as it takes)")
	fs.BoolVar(&o.noWait, "no-wait", false, fmt.Sprintf("do not wait: exit with status 75 (or -E's) at once when the lock is held; the lock service gets %v to answer", noWaitBudget))
	fs.IntVar(&o.busy, "E", exitBusy, "exit status `CODE` (0-255) when the lock is busy (-no-wait) or -wait ran out, as flock -E")
	durationVar(fs, &o.grace, "grace", defaultGrace, "after a lost lease, time `D` between SIGTERM and SIGKILL to COMMAND")
	fs.IntVar(&o.permits, "n", 0, "hold one of the `N` permits of the semaphore NAME, not the lock NAME (as consul lock -n): at most N COMMANDs at once")
	fs.BoolVar(&o.verbose, "v", false, "report acquire, release and forwarded signals on standard error")
	fs.SetOutput(discard{})
	return fs
}

// discard is an io.Writer that drops everything: the flag package's own
// multi-line messages are replaced by dlock's one-line usage errors.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// flagDefaults renders a flag set's defaults for the help text.
func flagDefaults(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(discard{})
	return b.String()
}

// parseRun checks the arguments of "dlock run" and returns the options, the
// lock name and COMMAND with its arguments; msg is a usage error.
func parseRun(args []string) (o runOpts, name string, command []string, msg string, help bool) {
	fs := newRunFlags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, "", nil, "", true
		}
		return o, "", nil, err.Error(), false
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case set["wait"] && o.noWait:
		return o, "", nil, "-wait and -no-wait exclude each other", false
	case set["wait"] && o.wait <= 0:
		return o, "", nil, fmt.Sprintf("-wait %v: want a positive duration (or -no-wait)", o.wait), false
	case o.ttl < dlock.MinTTL:
		return o, "", nil, fmt.Sprintf("-ttl %v: want at least %v", o.ttl, dlock.MinTTL), false
	case o.grace < 0:
		return o, "", nil, fmt.Sprintf("-grace %v: want a non-negative duration", o.grace), false
	case o.busy < 0 || o.busy > 255:
		return o, "", nil, fmt.Sprintf("-E %d: want an exit status from 0 to 255", o.busy), false
	case set["n"] && o.permits < 1:
		return o, "", nil, fmt.Sprintf("-n %d: want a number of permits of at least 1", o.permits), false
	}
	name, command, msg = runArgs(fs.Args(), flagsEndWithDashes(fs, args))
	return o, name, command, msg, false
}

// runArgs splits the arguments after the flags into NAME and COMMAND.
// dashes says that the flags ended with "--", which the flag package
// consumes: everything after it is COMMAND, and NAME is missing. After
// NAME, "--" is optional.
func runArgs(rest []string, dashes bool) (name string, command []string, msg string) {
	const usage = "dlock run [flags] NAME -- COMMAND [ARG...]"
	switch {
	case len(rest) == 0:
		return "", nil, "missing lock NAME and COMMAND: " + usage
	case dashes:
		return "", nil, fmt.Sprintf("missing lock NAME: it goes before --, and %q after -- is COMMAND: %s", rest[0], usage)
	}
	name, command = rest[0], rest[1:]
	if len(command) > 0 && command[0] == "--" {
		command = command[1:]
	} else if len(command) > 0 && strings.HasPrefix(command[0], "-") {
		return "", nil, fmt.Sprintf("%q after NAME: flags go before NAME, and -- before COMMAND", command[0])
	}
	if len(command) == 0 {
		return "", nil, fmt.Sprintf("missing COMMAND: dlock run [flags] %s -- COMMAND [ARG...]", name)
	}
	return name, command, ""
}

// flagsEndWithDashes reports whether fs, having parsed args, stopped at a
// "--" (which it consumed) rather than at the first argument that is not
// a flag. It walks args as the flag package does: a "--" that is the value
// of a flag does not count.
func flagsEndWithDashes(fs *flag.FlagSet, args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return true
		case len(a) < 2 || a[0] != '-':
			return false
		case strings.Contains(a, "="):
			continue
		}
		if f := fs.Lookup(strings.TrimPrefix(a[1:], "-")); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				i++ // the next argument is the flag's value
			}
		}
	}
	return false
}

func (c cli) run(args []string) int {
	o, name, command, msg, help := parseRun(args)
	if help {
		fmt.Fprint(c.stdout, runUsage())
		return 0
	}
	if msg != "" {
		return c.usageError(msg)
	}
	rawURL, err := c.resolveURL(o.url)
	if err != nil {
		return c.usageError(err.Error())
	}

	// Take the signals before anything can block, so that an interrupt
	// while connecting or waiting ends dlock cleanly and one while COMMAND
	// runs reaches COMMAND.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	l, lease, code := c.acquireInterruptibly(sigs, rawURL, name, o)
	if lease == nil {
		return code
	}
	defer l.Close()
	if o.verbose {
		caps := l.Capabilities()
		c.say(rawURL, "acquired %s (fence %d, %s/%s)", o.what(name), lease.Token(), caps.Backend, caps.Strategy)
	}
	return c.runCommand(sigs, rawURL, name, o, l, lease, command)
}

// acquireInterruptibly opens the Locker and acquires name, giving up when
// a terminating signal arrives. It returns a nil lease and dlock's exit
// status when the lock was not acquired.
func (c cli) acquireInterruptibly(sigs <-chan os.Signal, rawURL, name string, o runOpts) (*dlock.Locker, *dlock.Lease, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		l     *dlock.Locker
		lease *dlock.Lease
		code  int
		msg   string
	}
	done := make(chan result, 1)
	go func() {
		l, lease, code, msg := c.acquire(ctx, rawURL, name, o)
		done <- result{l, lease, code, msg}
	}()
	for {
		select {
		case r := <-done:
			if r.lease == nil {
				return nil, nil, c.failf(r.code, rawURL, "%s", r.msg)
			}
			return r.l, r.lease, 0
		case sig := <-sigs:
			if !terminates(sig) {
				continue // nothing to forward it to yet
			}
			cancel()
			if r := <-done; r.lease != nil { // granted just before the cancel
				release(r.lease)
				r.l.Close()
			}
			return nil, nil, c.failf(signalStatus(sig), rawURL, "interrupted by %v while waiting for %s; COMMAND not run", sig, o.what(name))
		}
	}
}

// acquire opens the Locker and acquires name as the flags say. Without a
// lease it returns dlock's exit status and a one-line message; the Locker
// is then closed.
//
// Reaching the service (Open and a first attempt) has a budget: D with
// -wait D, which bounds the whole wait, and noWaitBudget with -no-wait;
// without either, the drivers' own timeouts apply. A budget that runs out
// before the service answered is status 69, not "busy": the first attempt
// tells the two apart.
func (c cli) acquire(ctx context.Context, rawURL, name string, o runOpts) (*dlock.Locker, *dlock.Lease, int, string) {
	waitCtx, budget, budgetFlag := ctx, time.Duration(0), ""
	if o.wait > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, o.wait)
		defer cancel()
		budget, budgetFlag = o.wait, fmt.Sprintf("-wait %v", o.wait)
	}
	firstCtx := waitCtx
	if o.noWait {
		var cancel context.CancelFunc
		firstCtx, cancel = context.WithTimeout(ctx, noWaitBudget)
		defer cancel()
		budget, budgetFlag = noWaitBudget, "the budget of -no-wait"
	}
	noAnswer := func() (*dlock.Locker, *dlock.Lease, int, string) {
		if ctx.Err() != nil {
			return nil, nil, 0, "" // interrupted: the caller reports it
		}
		return nil, nil, exitUnavailable, fmt.Sprintf("the lock service %s did not answer within %v (%s); COMMAND not run", driver.Redact(rawURL), budget, budgetFlag)
	}

	l, err := dlock.Open(firstCtx, rawURL)
	if err != nil {
		if firstCtx.Err() != nil {
			return noAnswer()
		}
		return nil, nil, openStatus(err), openFailure(err) + "; COMMAND not run"
	}
	take, msg := c.taker(l, name, o)
	if take == nil {
		l.Close()
		return nil, nil, exitUsage, msg + "; COMMAND not run"
	}
	lease, err := take(firstCtx, false)
	answered := err == nil || errors.Is(err, dlock.ErrNotAcquired)
	if errors.Is(err, dlock.ErrNotAcquired) && !o.noWait {
		if o.verbose {
			c.say(rawURL, "%s; waiting", busy(l, name, o))
		}
		lease, err = take(waitCtx, true)
	}
	if err == nil {
		return l, lease, 0, ""
	}
	defer l.Close()
	switch {
	case ctx.Err() != nil:
		return nil, nil, 0, "" // interrupted: the caller reports it
	case !answered && firstCtx.Err() != nil:
		return noAnswer()
	case errors.Is(err, dlock.ErrNotAcquired):
		return nil, nil, o.busy, busy(l, name, o) + "; COMMAND not run"
	case waitCtx.Err() != nil && errors.Is(err, context.DeadlineExceeded):
		return nil, nil, o.busy, fmt.Sprintf("gave up waiting for %s after %v%s; COMMAND not run", o.what(name), o.wait, holder(l, name, o))
	case o.permits > 0 && errors.Is(err, dlock.ErrInvalidOption):
		// Another -n for the same semaphore, stored by its holders: the
		// driver's message says both numbers.
		return nil, nil, exitUsage, errText(err) + " (-n must agree with the semaphore's holders); COMMAND not run"
	}
	return nil, nil, openStatus(err), "lock service failed: " + errText(err) + "; COMMAND not run"
}

// taker returns what takes the lock NAME or, with -n, a permit of the
// semaphore NAME: one attempt, or (wait) until ctx ends. Without one it
// says why, a usage error: -n on a backend without semaphores, or above
// its maximum.
func (c cli) taker(l *dlock.Locker, name string, o runOpts) (take func(ctx context.Context, wait bool) (*dlock.Lease, error), msg string) {
	if o.permits == 0 {
		opts := &dlock.AcquireOptions{TTL: o.ttl, Owner: owner()}
		return func(ctx context.Context, wait bool) (*dlock.Lease, error) {
			if wait {
				return l.Acquire(ctx, name, opts)
			}
			return l.TryAcquire(ctx, name, opts)
		}, ""
	}
	sem, err := l.Semaphore(name, o.permits)
	caps := l.Capabilities()
	backend := caps.Backend
	if caps.Strategy != "" {
		backend += " (" + caps.Strategy + ")"
	}
	switch {
	case errors.Is(err, dlock.ErrUnsupported):
		return nil, fmt.Sprintf("-n %d: %s has no semaphores; without -n, dlock run takes the lock NAME", o.permits, backend)
	case errors.Is(err, dlock.ErrInvalidOption) && o.permits > caps.MaxPermits:
		return nil, fmt.Sprintf("-n %d: %s allows at most %d permits", o.permits, backend, caps.MaxPermits)
	case err != nil:
		return nil, fmt.Sprintf("-n %d: %s", o.permits, errText(err))
	}
	// A permit has no owner: permits are not reentrant, and dlock status
	// inspects locks only.
	opts := &dlock.AcquireOptions{TTL: o.ttl}
	return func(ctx context.Context, wait bool) (*dlock.Lease, error) {
		if wait {
			return sem.Acquire(ctx, opts)
		}
		return sem.TryAcquire(ctx, opts)
	}, ""
}

// busy says that the lock or every permit of the semaphore is held.
func busy(l *dlock.Locker, name string, o runOpts) string {
	if o.permits > 0 {
		return fmt.Sprintf("semaphore %q is busy: all %d permits are held", name, o.permits)
	}
	return fmt.Sprintf("lock %q is busy%s", name, holder(l, name, o))
}

// holder describes the current holder of the lock name for a "busy"
// message, or "" when the backend cannot tell or name is a semaphore.
func holder(l *dlock.Locker, name string, o runOpts) string {
	if o.permits > 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	info, err := l.Inspect(ctx, name)
	if err != nil || !info.Held {
		return ""
	}
	var parts []string
	if info.Owner != "" {
		parts = append(parts, "held by "+info.Owner)
	}
	if info.Fence != 0 {
		parts = append(parts, fmt.Sprintf("fence %d", info.Fence))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// owner identifies this dlock to "dlock status": host/pid.
func owner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// release releases a lease with a fresh bounded context.
func release(lease *dlock.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return lease.Release(ctx)
}

// childEnv is base with DLOCK_NAME, DLOCK_TOKEN, DLOCK_URL (password
// redacted) and, for a permit of a semaphore (permits > 0),
// DLOCK_PERMITS set, replacing any inherited values.
func childEnv(base []string, name string, token uint64, rawURL string, permits int) []string {
	out := make([]string, 0, len(base)+4)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if k == envName || k == envToken || k == envURL || k == envPermits {
			continue
		}
		out = append(out, kv)
	}
	out = append(out,
		envName+"="+name,
		fmt.Sprintf("%s=%d", envToken, token),
		envURL+"="+driver.Redact(rawURL))
	if permits > 0 {
		out = append(out, envPermits+"="+strconv.Itoa(permits))
	}
	return out
}

// runCommand runs COMMAND while lease is held, forwards signals to it,
// terminates it when the lease is lost, releases the lock after it exits
// and returns dlock's exit status.
func (c cli) runCommand(sigs <-chan os.Signal, rawURL, name string, o runOpts, l *dlock.Locker, lease *dlock.Lease, command []string) int {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = childEnv(os.Environ(), name, lease.Token(), rawURL, o.permits)
	setProcAttr(cmd)

	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		// COMMAND's parent-death signal (Linux) fires when the thread that
		// started it exits: keep this goroutine on its thread, never
		// unlocked, until COMMAND has been reaped.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		relErr := release(lease)
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		if relErr != nil {
			c.say(rawURL, "release %s: %s", o.what(name), errText(relErr))
		}
		return c.failf(code, rawURL, "cannot run %s: %s", command[0], oneLine(err.Error()))
	}

	var (
		lostErr  error
		leaseEnd = lease.Done()
		kill     <-chan time.Time
		waitErr  error
	)
loop:
	for {
		select {
		case waitErr = <-exited:
			break loop
		case sig := <-sigs:
			if o.verbose {
				c.say(rawURL, "forwarding %v to COMMAND", sig)
			}
			signalGroup(cmd.Process, sig)
		case <-leaseEnd:
			leaseEnd = nil
			lostErr = lease.Err()
			c.say(rawURL, "%s lost while COMMAND was running (%s); sending SIGTERM to COMMAND, SIGKILL in %v", o.what(name), errText(lostErr), o.grace)
			signalGroup(cmd.Process, syscall.SIGTERM)
			t := time.NewTimer(o.grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			c.say(rawURL, "COMMAND still running %v after SIGTERM; sending SIGKILL", o.grace)
			signalGroup(cmd.Process, syscall.SIGKILL)
		}
	}
	status := exitStatus(waitErr)

	if lostErr != nil {
		release(lease) // best effort: the server no longer holds it for us
		return c.failf(exitLost, rawURL, "%s was lost; COMMAND was terminated (its status: %d)", o.what(name), status)
	}
	err := release(lease)
	switch {
	case err == nil:
		if o.verbose {
			c.say(rawURL, "released %s; COMMAND exited with status %d", o.what(name), status)
		}
		return status
	case errors.Is(err, dlock.ErrNotHeld):
		// The lease ended while COMMAND ran, unnoticed until now: its work
		// may have overlapped another holder's.
		return c.failf(exitLost, rawURL, "%s was lost while COMMAND ran (%s); COMMAND exited with status %d", o.what(name), errText(err), status)
	default:
		c.say(rawURL, "could not release %s (%s); the lock service frees it when the lease ends", o.what(name), errText(err))
		return status
	}
}

// exitStatus maps COMMAND's end to an exit status: its own status, or
// 128+N when signal N killed it.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitSignalBase + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitUnavailable // Wait itself failed: not expected
}

// signalStatus is the conventional status of a process ended by sig.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignalBase + int(s)
	}
	return exitSignalBase + 2
}
