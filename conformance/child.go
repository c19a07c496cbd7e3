package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/childproc"
)

// The cross-process cases re-execute the test binary (internal/childproc).
// The child finds its role in the environment; the first Run, Check or
// Evaluate it reaches plays the role and exits the process.
//
// Protocol, one line at a time:
//
//	child → parent: "acquired TOKEN", "write TOKEN", "done lost|other|timeout ERR",
//	                "watching", "pause lost|held|none DETAIL", "error MSG"
//	parent → child: "write", "wait-done DURATION", "watch-pause", "pause-report", "exit"
const (
	envChild = "DLOCK_CONFORMANCE_CHILD" // the role; set means "be a child"
	envURL   = "DLOCK_CONFORMANCE_URL"
	envName  = "DLOCK_CONFORMANCE_NAME"
	envTTL   = "DLOCK_CONFORMANCE_TTL"
	// envPermits, when set, makes the child take one of that many permits
	// of the semaphore envName instead of the lock.
	envPermits = "DLOCK_CONFORMANCE_PERMITS"
)

func needCrossProcess(c *caseT) string {
	switch {
	case c.h.URL() == "":
		return "the harness has no URL a child process can open"
	case !childproc.Signals:
		return "process signals (SIGKILL, SIGSTOP) are not available on this system"
	case flag.Lookup("test.run") == nil || c.cfg.childTest == "":
		return "not running under go test: the child processes re-execute the test binary"
	}
	return ""
}

// childMain plays a child's role when the process is one, and exits.
func childMain() { childproc.Serve(envChild, runChild) }

func runChild(_ string, parent *childproc.Parent) int {
	say := func(format string, args ...any) {
		_ = parent.Send(fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		say("error bad %s: %v", envTTL, err)
		return 2
	}
	l, err := dlock.Open(ctx, os.Getenv(envURL))
	if err != nil {
		say("error open: %v", err)
		return 1
	}
	defer l.Close()
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	ls, err := childAcquire(actx, l, ttl)
	acancel()
	if err != nil {
		say("error acquire: %v", err)
		return 1
	}
	say("acquired %d", ls.Token())
	pauses := make(chan string, 1)
	for {
		line, err := parent.Recv()
		if err != nil {
			return 0
		}
		cmd, arg, _ := strings.Cut(line, " ")
		switch cmd {
		case "write":
			say("write %d", ls.Token())
		case "wait-done":
			d, _ := time.ParseDuration(arg)
			select {
			case <-ls.Done():
				kind := "other"
				if errors.Is(ls.Err(), dlock.ErrLockLost) {
					kind = "lost"
				}
				say("done %s %v", kind, ls.Err())
			case <-time.After(d):
				say("done timeout the lease is still held after %v", d)
			}
		case "watch-pause":
			go watchPause(ls, ttl, pauses)
			say("watching for a pause")
		case "pause-report":
			select {
			case r := <-pauses:
				say("pause %s", r)
			case <-time.After(10 * time.Second):
				say("pause none no pause longer than the TTL was seen")
			}
		case "exit":
			return 0
		}
	}
}

// childAcquire takes the lock envName, or one of the envPermits permits
// of the semaphore envName.
func childAcquire(ctx context.Context, l *dlock.Locker, ttl time.Duration) (*dlock.Lease, error) {
	opts := &dlock.AcquireOptions{TTL: ttl}
	p := os.Getenv(envPermits)
	if p == "" {
		return l.Acquire(ctx, os.Getenv(envName), opts)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return nil, fmt.Errorf("bad %s: %w", envPermits, err)
	}
	sem, err := l.Semaphore(os.Getenv(envName), n)
	if err != nil {
		return nil, err
	}
	return sem.Acquire(ctx, opts)
}

// watchPause spins, reading the clock, until it sees a gap of over 20ms
// between two iterations across which the lease's deadline passed: the
// process was stopped past the deadline. In the first instant after it
// resumes (this goroutine was running when the process stopped, so it runs
// first, before any timer of the lease fires) it reports what the lease
// says: it must already read as lost through Err, Done and its Context.
func watchPause(ls *dlock.Lease, ttl time.Duration, out chan<- string) {
	lctx, cancel := ls.Context(context.Background())
	defer cancel()
	dl, hasDeadline := ls.Deadline()
	if !hasDeadline {
		out <- "none the lease has no deadline (session-bound)"
		return
	}
	last := time.Now()
	for {
		now := time.Now()
		if gap := now.Sub(last); gap > 20*time.Millisecond && !now.Before(dl) {
			err := ls.Err()
			done := false
			select {
			case <-ls.Done():
				done = true
			default:
			}
			cerr := lctx.Err()
			detail := fmt.Sprintf("after a pause of %v that passed the deadline by %v (TTL %v): Err=%v, Done closed=%v, Context.Err=%v",
				gap.Round(time.Millisecond), now.Sub(dl).Round(time.Millisecond), ttl, err, done, cerr)
			if err != nil && done && cerr != nil {
				out <- "lost " + detail
			} else {
				out <- "held " + detail
			}
			return
		}
		last = now
		if dl, _ = ls.Deadline(); !now.Before(dl) {
			out <- "none the lease ended before any pause: " + fmt.Sprint(ls.Err())
			return
		}
	}
}

// spawn starts a child process that opens the harness URL and acquires
// name; the case's clean-up kills it.
func (c *caseT) spawn(name string) *childproc.Child { return c.spawnPermit(name, 0) }

// spawnPermit starts a child process that opens the harness URL and
// acquires the lock name (permits 0) or one of the permits of the
// semaphore name; the case's clean-up kills it.
func (c *caseT) spawnPermit(name string, permits int) *childproc.Child {
	env := []string{envURL + "=" + c.h.URL(), envName + "=" + name, envTTL + "=" + c.ttl().String()}
	what := "the child process"
	if permits > 0 {
		env = append(env, envPermits+"="+strconv.Itoa(permits))
		what = "a child process holding a permit"
	}
	ch, err := childproc.Start(childproc.Spec{
		Name:    what,
		RoleEnv: envChild, Role: "hold",
		Env:  env,
		Args: []string{"-test.run=^" + regexp.QuoteMeta(c.cfg.childTest) + "$", "-test.count=1", "-test.timeout=5m"},
	})
	if err != nil {
		c.Fatalf("starting a child process: %v", err)
	}
	c.Cleanup(ch.Close)
	return ch
}

// expect returns the rest of the child's next line, which must start with
// word, or ends the case.
func (c *caseT) expect(ch *childproc.Child, word string, d time.Duration) string {
	rest, err := ch.Expect(word, d)
	if err != nil {
		c.Fatalf("%v", err)
	}
	return rest
}

func (c *caseT) tell(ch *childproc.Child, line string) {
	if err := ch.Send(line); err != nil {
		c.Fatalf("%v", err)
	}
}

func (c *caseT) token(s string) uint64 {
	tok, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		c.Fatalf("bad token %q from the child process", s)
	}
	return tok
}

// childStart bounds a child's start-up (a race-enabled test binary, a
// connection) and its first Acquire.
const childStart = 60 * time.Second

func caseCrossProcessCrash(c *caseT) {
	p := c.Locker()
	name := c.Name("crash")
	ch := c.spawn(name)
	tok := c.token(c.expect(ch, "acquired", childStart))
	c.expectHeld(p, name, "while a child process holds it")
	bound := c.crashBound() + c.expiryNotice()
	killed := time.Now()
	if err := ch.Kill(); err != nil {
		c.Fatalf("SIGKILL of the child: %v", err)
	}
	<-ch.Exited()
	ctx, cancel := c.withTimeout(bound + 5*time.Second)
	defer cancel()
	ls, err := p.Acquire(ctx, name, c.opts())
	el := time.Since(killed)
	if err != nil {
		c.Fatalf("the lock of a killed holder was not freed within %v: %v", bound+5*time.Second, err)
	}
	if el > bound {
		c.Errorf("the lock of a killed holder was free %v after SIGKILL, bound %v (ReleaseOnCrash %v + notice %v)", el, bound, c.caps.ReleaseOnCrash, c.expiryNotice())
	}
	if c.caps.Fencing && ls.Token() <= tok {
		c.Errorf("the token after the crash (%d) is not above the dead holder's (%d)", ls.Token(), tok)
	}
	c.Notef("killed holder's lock taken over after %v (bound %v)", el, bound)
	c.release(ls, "new holder")
}

func casePausedHolderFenced(c *caseT) {
	p := c.Locker()
	name := c.Name("paused")
	reg := &Register{}
	ch := c.spawn(name)
	tok1 := c.token(c.expect(ch, "acquired", childStart))
	c.tell(ch, "write")
	if err := reg.Write(c.token(c.expect(ch, "write", 10*time.Second)), "child"); err != nil {
		c.Fatalf("the live holder's write was rejected: %v", err)
	}

	var bound time.Duration
	rv, canRevoke := c.h.(Revoker)
	switch {
	case !c.caps.SessionBound:
		bound = c.ttl() + c.expiryNotice()
	case c.caps.ReleaseOnCrash > 0:
		bound = c.caps.ReleaseOnCrash + c.expiryNotice()
	case canRevoke:
		bound = c.expiryNotice()
	default:
		c.Skipf("a paused holder keeps its connection and its lock, and the harness has no Revoker hook")
	}
	// A TTL-bound lease has a local deadline: the holder must read it as
	// lost in the first instant after the pause, before its timers run.
	watch := !c.caps.SessionBound
	if watch {
		c.tell(ch, "watch-pause")
		c.expect(ch, "watching", 10*time.Second)
	}
	if err := ch.Stop(); err != nil {
		c.Fatalf("SIGSTOP of the child: %v", err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = ch.Cont()
		}
	}()
	if c.caps.SessionBound && c.caps.ReleaseOnCrash <= 0 {
		if err := rv.Revoke(c.ctx, name); err != nil {
			c.Fatalf("harness Revoke(%q) of the paused holder: %v", name, err)
		}
	}
	ctx, cancel := c.withTimeout(bound + 5*time.Second)
	ls, err := p.Acquire(ctx, name, c.opts())
	cancel()
	if err != nil {
		c.Fatalf("the lock of a paused holder was not freed within %v: %v", bound+5*time.Second, err)
	}
	tok2 := ls.Token()
	if tok2 <= tok1 {
		c.Errorf("the new holder's token %d is not above the paused holder's %d", tok2, tok1)
	}
	if err := reg.Write(tok2, "parent"); err != nil {
		c.Errorf("the new holder's write was rejected: %v", err)
	}
	if err := ch.Cont(); err != nil {
		c.Fatalf("SIGCONT of the child: %v", err)
	}
	stopped = false
	if watch {
		c.tell(ch, "pause-report")
		switch r := c.expect(ch, "pause", 20*time.Second); {
		case strings.HasPrefix(r, "lost "):
			c.Notef("first instant after the pause: %s", r)
		case strings.HasPrefix(r, "none "):
			// The lease had ended before the pause (a keep-alive starved
			// on a loaded machine): the first instant after a pause was
			// not observed, and this run proves nothing about it.
			c.Notef("the first instant after the pause was not observed: %s", r)
		default:
			c.Errorf("the resumed holder was told it still held the lock in the first instant after a pause past its lease's deadline: %s", r)
		}
	}
	c.tell(ch, "write")
	old := c.token(c.expect(ch, "write", 10*time.Second))
	if err := reg.Write(old, "child"); !errors.Is(err, ErrStaleToken) {
		c.Errorf("the resumed holder's write with its old token %d after the new holder's %d was not rejected (%v)", old, tok2, err)
	}
	wait := c.ttl() + c.crashBound() + c.fast()
	c.tell(ch, "wait-done "+wait.String())
	done := c.expect(ch, "done", wait+10*time.Second)
	if !strings.HasPrefix(done, "lost ") {
		c.Errorf("the resumed holder's lease was not reported lost with ErrLockLost: %s", done)
	}
	if _, v := reg.Read(); v != "parent" {
		c.Errorf("the fenced register holds %v, want the new holder's write", v)
	}
	c.Notef("paused holder (token %d) replaced by token %d; its write with token %d: rejected; its lease: %s", tok1, tok2, old, done)
	c.tell(ch, "exit")
	c.release(ls, "new holder")
}
