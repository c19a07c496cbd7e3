package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/internal/childproc"
)

// The client parts of a run with Runner.Procs > 1 are this program
// re-executed (internal/childproc), one line at a time:
//
//	parent → child: the Part (JSON), "go"; then the end of input
//	child → parent: "ready", "stopped", the PartResult (JSON), or
//	                "error MSG" / "error stuck MSG" instead of any of them

// ChildEnv is the environment variable that makes a process a client part.
const ChildEnv = "DLOCKBENCH_CHILD"

// runChildren starts procs children, each with its share of the clients,
// and drives them through ready → go → stopped → result.
func (r *Runner) runChildren(ctx context.Context, base Part, procs int, chkPath string, before, after func()) ([]*PartResult, error) {
	kids := make([]*childproc.Child, 0, procs)
	defer func() {
		for _, c := range kids {
			c.Close()
		}
	}()
	first := 0
	for k := range procs {
		p := base
		p.Checker = chkPath
		p.First = first
		p.Count = base.Workload.Clients / procs
		if k < base.Workload.Clients%procs {
			p.Count++
		}
		first += p.Count
		c, err := childproc.Start(childproc.Spec{
			Name:    fmt.Sprintf("client process %d", k+1),
			RoleEnv: ChildEnv, Role: "1",
			Exe: r.Exe, Args: r.Args,
			Output: r.Stderr,
		})
		if err != nil {
			return nil, fmt.Errorf("bench: start client process: %w", err)
		}
		kids = append(kids, c)
		if err := c.SendJSON(p); err != nil {
			return nil, fmt.Errorf("bench: client process: %w", err)
		}
	}
	// The end of ctx ends the children, and so each wait below.
	stop := context.AfterFunc(ctx, func() {
		for _, c := range kids {
			_ = c.Kill()
		}
	})
	defer stop()
	expect := func(c *childproc.Child, want string) (string, error) {
		line, err := c.Next(0)
		if err != nil {
			return "", fmt.Errorf("bench: client process ended early: %w", err)
		}
		if err := childErr(line); err != nil {
			return "", err
		}
		if want != "" && line != want {
			return "", fmt.Errorf("bench: client process said %q, want %q", line, want)
		}
		return line, nil
	}
	for _, c := range kids {
		if _, err := expect(c, "ready"); err != nil {
			return nil, err
		}
	}
	before()
	for _, c := range kids {
		_ = c.Send("go") // a child that died says so below
	}
	for _, c := range kids {
		if _, err := expect(c, "stopped"); err != nil {
			return nil, err
		}
	}
	after()
	var out []*PartResult
	for _, c := range kids {
		line, err := expect(c, "")
		if err != nil {
			return nil, err
		}
		var pr PartResult
		if err := json.Unmarshal([]byte(line), &pr); err != nil {
			return nil, fmt.Errorf("bench: client process result: %w", err)
		}
		out = append(out, &pr)
		_ = c.CloseInput()
		if err := c.Wait(0); err != nil {
			return nil, fmt.Errorf("bench: client process: %w", err)
		}
	}
	return out, nil
}

// childErr turns a child's "error …" line back into an error (nil for
// any other line).
func childErr(line string) error {
	if msg, ok := strings.CutPrefix(line, "error stuck "); ok {
		return fmt.Errorf("%w: %s", ErrStuck, msg)
	}
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return errors.New(msg)
	}
	return nil
}

// ChildMain runs this process as a client part when the environment says
// so (see Runner.Procs), and exits; otherwise it returns at once. Call it
// first thing in main (and in TestMain of tests that run -procs).
func ChildMain() {
	if childproc.Role(ChildEnv) != "1" {
		return
	}
	childproc.Serve(ChildEnv, child)
}

// child is a client part: it reads its Part, says "ready" once its
// clients are connected and warm, runs on "go", says "stopped" at the
// end of the measured time and then its PartResult, or "error …" instead
// of any of these.
func child(_ string, parent *childproc.Parent) int {
	fail := func(err error) int {
		kind := "error "
		if errors.Is(err, ErrStuck) {
			kind = "error stuck "
		}
		_ = parent.Send(kind + err.Error())
		return 1
	}
	line, err := parent.Recv()
	if err != nil {
		return fail(fmt.Errorf("bench: child: read spec: %w", err))
	}
	var p Part
	if err := json.Unmarshal([]byte(line), &p); err != nil {
		return fail(fmt.Errorf("bench: child: spec: %w", err))
	}
	chk, err := OpenChecker(p.Checker)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := make(chan struct{})
	go func() {
		// "go" starts the run; the end of stdin (the parent died) stops it.
		l, err := parent.Recv()
		if err == nil && strings.TrimSpace(l) == "go" {
			close(start)
			for err == nil {
				_, err = parent.Recv()
			}
		}
		cancel()
	}()
	res, err := runPart(ctx, p, chk, hooks{
		ready:   func() { _ = parent.Send("ready") },
		start:   start,
		stopped: func() { _ = parent.Send("stopped") },
	})
	if err != nil {
		// Clients given up as stuck may still touch the checker: it stays
		// mapped until the process exits, which it is about to.
		return fail(err)
	}
	chk.Close(false)
	if err := parent.SendJSON(res); err != nil {
		return fail(err)
	}
	return 0
}
