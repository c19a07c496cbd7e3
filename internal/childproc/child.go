package childproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Spec says how to start a child.
type Spec struct {
	// Name says what the child is in error messages ("holder", "client 3").
	Name string
	// RoleEnv is the environment variable the child's Serve looks for, and
	// Role its value (not empty).
	RoleEnv, Role string
	// Env is added to this process's environment ("KEY=value").
	Env []string
	// Exe is the program to run (default: this binary, see Executable),
	// with Args. A test binary needs -test.run and the like in Args.
	Exe  string
	Args []string
	// Output, when set, also receives the child's stdout and stderr.
	Output io.Writer
	// OutputMax is how many of the last bytes of the child's output are
	// kept for error messages (0: 64 KiB).
	OutputMax int
	// DieWithParent has the child killed when this process dies (Linux;
	// ignored elsewhere), so that a crashed parent leaves no child behind.
	DieWithParent bool
}

// waitDelay bounds how long Wait waits for the child's output after it
// exited (something it started may hold the pipe).
const waitDelay = 2 * time.Second

// Child is a running child process seen from its parent.
type Child struct {
	name  string
	cmd   *exec.Cmd
	input *os.File // the child's stdin
	inMu  sync.Mutex
	lines *os.File // the read end of the child's file descriptor 3
	out   *Buffer

	mu      sync.Mutex
	queue   []string      // lines read, not yet taken
	eof     bool          // the child's channel closed
	changed chan struct{} // closed (and replaced) when queue or eof changes

	read    chan struct{} // closed when the reader goroutine returned
	exited  chan struct{} // closed when the process was reaped
	waitErr error         // cmd.Wait's, set before exited closes
	close   sync.Once
}

// Start starts a child as s says.
func Start(s Spec) (*Child, error) {
	if s.RoleEnv == "" || s.Role == "" {
		return nil, errors.New("childproc: Spec.RoleEnv and Spec.Role must be set")
	}
	exe := s.Exe
	if exe == "" {
		var err error
		if exe, err = Executable(); err != nil {
			return nil, fmt.Errorf("childproc: %w", err)
		}
	}
	name := s.Name
	if name == "" {
		name = s.Role
	}
	linesR, linesW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("childproc: %w", err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		linesR.Close()
		linesW.Close()
		return nil, fmt.Errorf("childproc: %w", err)
	}
	out := &Buffer{Max: s.OutputMax}
	if out.Max <= 0 {
		out.Max = 64 << 10
	}
	var output io.Writer = out
	if s.Output != nil {
		output = io.MultiWriter(out, s.Output)
	}
	cmd := exec.Command(exe, s.Args...)
	cmd.Env = append(append(os.Environ(), s.RoleEnv+"="+s.Role), s.Env...)
	cmd.Stdin = inR
	cmd.Stdout, cmd.Stderr = output, output
	cmd.ExtraFiles = []*os.File{linesW}
	cmd.WaitDelay = waitDelay
	ownGroup(cmd)
	err = start(cmd, s.DieWithParent)
	linesW.Close()
	inR.Close()
	if err != nil {
		linesR.Close()
		inW.Close()
		return nil, fmt.Errorf("childproc: start %s: %w", name, err)
	}
	c := &Child{
		name: fmt.Sprintf("%s (pid %d)", name, cmd.Process.Pid), cmd: cmd, input: inW, lines: linesR, out: out,
		changed: make(chan struct{}), read: make(chan struct{}), exited: make(chan struct{}),
	}
	go c.readLines()
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// readLines queues the child's lines until its channel closes: it never
// blocks on a parent that does not read them.
func (c *Child) readLines() {
	defer close(c.read)
	r := bufio.NewReaderSize(c.lines, 64<<10)
	for {
		line, err := readLine(r)
		c.mu.Lock()
		if err == nil {
			c.queue = append(c.queue, line)
		} else {
			c.eof = true
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Output returns the last bytes of the child's stdout and stderr.
func (c *Child) Output() string { return c.out.String() }

// outputTail is the child's output for an error message.
func (c *Child) outputTail() string {
	s := strings.TrimRight(c.out.String(), "\n")
	if s == "" {
		return "; it wrote no output"
	}
	return "; its output ends:\n" + s
}

// Send writes one line to the child's stdin (newlines in it become
// spaces). It is safe for concurrent use.
func (c *Child) Send(line string) error {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	if err := writeLine(c.input, line); err != nil {
		return fmt.Errorf("childproc: writing to %s: %w", c.name, err)
	}
	return nil
}

// SendJSON writes v as one line of JSON.
func (c *Child) SendJSON(v any) error {
	line, err := jsonLine(v)
	if err != nil {
		return err
	}
	return c.Send(line)
}

// CloseInput closes the child's stdin: its Recv returns io.EOF.
func (c *Child) CloseInput() error {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	return c.input.Close()
}

// Next returns the child's next line, waiting for it at most d (d <= 0:
// as long as the child lives). Its error wraps ErrTimeout when d passed,
// or ErrEnded when the child closed its channel, and ends with the
// child's last output.
func (c *Child) Next(d time.Duration) (string, error) {
	timeout, stop := timer(d)
	defer stop()
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			line := c.queue[0]
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return line, nil
		}
		eof, changed := c.eof, c.changed
		c.mu.Unlock()
		if eof {
			return "", c.endedErr("")
		}
		select {
		case <-changed:
		case <-timeout:
			return "", fmt.Errorf("childproc: %s said nothing within %v: %w%s", c.name, d, ErrTimeout, c.outputTail())
		}
	}
}

// endedErr says that the child ended before saying word ("": anything).
func (c *Child) endedErr(word string) error {
	state := "its channel closed while it runs"
	select {
	case <-c.exited:
		state = c.cmd.ProcessState.String()
	case <-time.After(waitDelay):
	}
	what := "anything more"
	if word != "" {
		what = fmt.Sprintf("%q", word)
	}
	return fmt.Errorf("childproc: %s ended (%s) before saying %s: %w%s", c.name, state, what, ErrEnded, c.outputTail())
}

// Expect returns the rest of the child's next line, which must be word or
// start with word and a space; d bounds the wait as for Next. Its errors
// say what the child said instead, or that it said nothing, and end with
// its last output.
func (c *Child) Expect(word string, d time.Duration) (string, error) {
	line, err := c.Next(d)
	switch {
	case errors.Is(err, ErrTimeout):
		return "", fmt.Errorf("childproc: %s did not say %q within %v: %w%s", c.name, word, d, ErrTimeout, c.outputTail())
	case errors.Is(err, ErrEnded):
		return "", c.endedErr(word)
	case err != nil:
		return "", err
	case line == word:
		return "", nil
	}
	if rest, ok := strings.CutPrefix(line, word+" "); ok {
		return rest, nil
	}
	return "", fmt.Errorf("childproc: %s said %q, want %q%s", c.name, line, word, c.outputTail())
}

// timer returns a channel that receives once d has passed (never for
// d <= 0) and the function that stops it.
func timer(d time.Duration) (<-chan time.Time, func() bool) {
	if d <= 0 {
		return nil, func() bool { return false }
	}
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Exited is closed when the child has exited and was reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Wait waits at most d (d <= 0: without limit) for the child to exit and
// returns the error of its exit (nil for status 0), or one that wraps
// ErrTimeout.
func (c *Child) Wait(d time.Duration) error {
	timeout, stop := timer(d)
	defer stop()
	select {
	case <-c.exited:
		return c.waitErr
	case <-timeout:
		return fmt.Errorf("childproc: %s did not exit within %v: %w%s", c.name, d, ErrTimeout, c.outputTail())
	}
}

// Kill sends SIGKILL to the child's process group (to the child alone
// where there are no groups). It returns os.ErrProcessDone when the child
// has already been reaped.
func (c *Child) Kill() error { return c.signal(sigKill) }

// Stop sends SIGSTOP to the child's process group.
func (c *Child) Stop() error { return c.signal(sigStop) }

// Cont sends SIGCONT to the child's process group.
func (c *Child) Cont() error { return c.signal(sigCont) }

func (c *Child) signal(sig int) error {
	select {
	case <-c.exited:
		return os.ErrProcessDone
	default:
	}
	if err := signalGroup(c.cmd.Process, sig); err != nil {
		return fmt.Errorf("childproc: signal %s: %w", c.name, err)
	}
	return nil
}

// Close kills the child's process group unless the child has exited,
// waits for it, and releases the pipes and the goroutines that served it.
// It is safe to call more than once.
func (c *Child) Close() {
	c.close.Do(func() {
		select {
		case <-c.exited:
		default:
			_ = c.Kill() // a stopped group dies of it too
			<-c.exited
		}
		_ = c.CloseInput()
		_ = c.lines.Close() // ends the reader even if something outside the group holds the pipe
		<-c.read
	})
}
