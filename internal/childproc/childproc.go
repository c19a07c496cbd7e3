// Package childproc re-executes the running binary (a test binary or a
// command) as child processes that play a role named in their
// environment, with a two-way channel of lines between parent and child.
//
// The test suites that need real processes (conformance's crash and pause
// cases, the fault runs' clients, dlockbench's client processes) share
// this one mechanism and keep only their own vocabulary on top: plain
// words or one JSON value a line.
//
// The child writes its lines on file descriptor 3 and reads the parent's
// on its stdin; its stdout and stderr are kept (the last bytes of them)
// for the parent's failure messages. Each child leads a process group of
// its own on Unix, so Kill, Stop and Cont reach whatever it started too.
//
// Parent:
//
//	c, err := childproc.Start(childproc.Spec{Name: "holder", RoleEnv: "X_CHILD", Role: "hold"})
//	defer c.Close()
//	tok, err := c.Expect("acquired", time.Minute)
//	err = c.Send("write")
//
// Child, first thing in TestMain or main (or wherever the re-executed
// binary first gets control):
//
//	childproc.Serve("X_CHILD", func(role string, p *childproc.Parent) int {
//		p.Send("acquired 42")
//		line, err := p.Recv()
//		...
//	})
//
// The package uses only the standard library: the public conformance
// package imports it.
package childproc

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
)

// Signals reports whether Stop and Cont work here and Kill reaches a
// child's whole process group (Unix); elsewhere Kill ends the child
// alone and Stop and Cont return errors.ErrUnsupported.
const Signals = signals

var (
	// ErrTimeout is wrapped by the errors of Next, Expect and Wait when
	// their time ran out.
	ErrTimeout = errors.New("timed out")
	// ErrEnded is wrapped by the errors of Next and Expect when the child
	// closed its channel (it exited) with no line left to read.
	ErrEnded = errors.New("the child ended")
)

// Executable returns the path of the running binary.
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil && len(os.Args) > 0 && os.Args[0] != "" {
		return os.Args[0], nil
	}
	return exe, err
}

// Role returns the role this process was started in: the value of the
// environment variable env, "" when it was not started as a child.
func Role(env string) string { return os.Getenv(env) }

// Serve returns at once unless the environment variable env names a
// role; then it runs main with the channel to the parent and exits the
// process with main's result.
func Serve(env string, main func(role string, p *Parent) int) {
	role := Role(env)
	if role == "" {
		return
	}
	p := NewParent(os.Stdin, os.NewFile(3, "childproc-parent"))
	os.Exit(main(role, p))
}

// Parent is the child's end of the channel.
type Parent struct {
	mu  sync.Mutex // one line at a time on out
	out io.Writer
	in  *bufio.Reader
}

// NewParent returns the end of a channel that reads the parent's lines
// from in and writes to out. Serve makes the real one (stdin and file
// descriptor 3); tests of a suite's child loop can make one on pipes.
func NewParent(in io.Reader, out io.Writer) *Parent {
	return &Parent{out: out, in: bufio.NewReaderSize(in, 64<<10)}
}

// Send writes one line to the parent (newlines in it become spaces). It is
// safe for concurrent use.
func (p *Parent) Send(line string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return writeLine(p.out, line)
}

// SendJSON writes v as one line of JSON.
func (p *Parent) SendJSON(v any) error {
	line, err := jsonLine(v)
	if err != nil {
		return err
	}
	return p.Send(line)
}

// Recv returns the parent's next line, io.EOF once the parent closed its
// end (it called CloseInput, or it died). One goroutine at a time may
// call it.
func (p *Parent) Recv() (string, error) { return readLine(p.in) }

// RecvJSON reads the parent's next line into v.
func (p *Parent) RecvJSON(v any) error {
	line, err := p.Recv()
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(line), v)
}

// writeLine writes line and a newline in one Write, so that lines of
// concurrent writers (serialised by the caller) never interleave.
func writeLine(w io.Writer, line string) error {
	_, err := io.WriteString(w, strings.ReplaceAll(line, "\n", " ")+"\n")
	return err
}

func jsonLine(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// readLine returns the next line without its newline (a last line
// without one too), or the reader's error.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"), nil
}

// Buffer is a byte buffer safe for concurrent use that keeps the last Max
// bytes written to it (everything when Max is 0).
type Buffer struct {
	Max int

	mu sync.Mutex
	b  []byte
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if b.Max > 0 && len(b.b) > b.Max {
		b.b = append(b.b[:0], b.b[len(b.b)-b.Max:]...)
	}
	return len(p), nil
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}
