package childproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests re-execute this test binary in the roles of testChild.
const roleEnv = "CHILDPROC_TEST_ROLE"

func TestMain(m *testing.M) {
	Serve(roleEnv, testChild)
	os.Exit(m.Run())
}

// testChild plays a role:
//
//   - echo: says "role ROLE VAR" (VAR from Spec.Env), then answers each
//     line L with "echo L", a JSON line with the same JSON back, and
//     "exit N" by exiting with N; at the end of stdin it says "bye";
//   - mute: writes its last words to stderr and waits for stdin to end;
//   - crash: writes to stderr and exits with status 3 without a word;
//   - group: starts a grandchild ("mute", holding the channel) and says
//     "grandchild PID", then waits;
//   - chatty: says 1000 lines and waits for stdin to end.
func testChild(role string, p *Parent) int {
	switch role {
	case "echo":
		p.Send("role " + role + " " + os.Getenv("CHILDPROC_TEST_VAR"))
		for {
			line, err := p.Recv()
			if err != nil {
				p.Send("bye")
				return 0
			}
			if code, ok := strings.CutPrefix(line, "exit "); ok {
				n, _ := strconv.Atoi(code)
				return n
			}
			if strings.HasPrefix(line, "{") {
				p.Send(line)
				continue
			}
			p.Send("echo " + line)
		}
	case "mute":
		fmt.Fprintln(os.Stderr, "the mute child's last words")
		for {
			if _, err := p.Recv(); err != nil {
				return 0
			}
		}
	case "crash":
		fmt.Fprintln(os.Stderr, "the crashing child's last words")
		return 3
	case "group":
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), roleEnv+"=mute")
		cmd.Stdin = os.Stdin                                  // it waits for the parent's end of stdin
		cmd.ExtraFiles = []*os.File{os.NewFile(3, "channel")} // and holds the channel open
		if err := cmd.Start(); err != nil {
			p.Send("error " + err.Error())
			return 1
		}
		p.Send("grandchild " + strconv.Itoa(cmd.Process.Pid))
		_ = cmd.Wait()
		return 0
	case "chatty":
		for i := range 1000 {
			p.Send(strconv.Itoa(i))
		}
		for {
			if _, err := p.Recv(); err != nil {
				return 0
			}
		}
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}

func startRole(t *testing.T, role string, env ...string) *Child {
	t.Helper()
	c, err := Start(Spec{Name: role + " child", RoleEnv: roleEnv, Role: role, Env: env, Args: []string{"-test.run=^$"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func expect(t *testing.T, c *Child, word, want string) {
	t.Helper()
	got, err := c.Expect(word, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("%s %q, want %s %q", word, got, word, want)
	}
}

func TestChannelBothWays(t *testing.T) {
	c := startRole(t, "echo", "CHILDPROC_TEST_VAR=set by the parent")
	expect(t, c, "role", "echo set by the parent")
	if err := c.Send("two\nlines"); err != nil {
		t.Fatal(err)
	}
	expect(t, c, "echo", "two lines")
	type msg struct {
		K string
		N int
	}
	if err := c.SendJSON(msg{"k", 7}); err != nil {
		t.Fatal(err)
	}
	line, err := c.Next(30 * time.Second)
	if err != nil || line != `{"K":"k","N":7}` {
		t.Fatalf("JSON line back: %q, %v", line, err)
	}
	if err := c.CloseInput(); err != nil {
		t.Fatal(err)
	}
	expect(t, c, "bye", "")
	if err := c.Wait(30 * time.Second); err != nil {
		t.Fatalf("Wait after the end of stdin: %v", err)
	}
	if _, err := c.Next(time.Second); !errors.Is(err, ErrEnded) {
		t.Fatalf("Next after the child exited: %v, want ErrEnded", err)
	}
}

func TestExitStatus(t *testing.T) {
	c := startRole(t, "echo")
	expect(t, c, "role", "echo ")
	c.Send("exit 5")
	var ee *exec.ExitError
	if err := c.Wait(30 * time.Second); !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("Wait = %v, want exit status 5", err)
	}
}

func TestExpectTimeoutSaysWhatTheChildWrote(t *testing.T) {
	c := startRole(t, "mute")
	for !strings.Contains(c.Output(), "last words") {
		time.Sleep(10 * time.Millisecond)
	}
	_, err := c.Expect("ready", 200*time.Millisecond)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Expect = %v, want ErrTimeout", err)
	}
	for _, want := range []string{`mute child (pid `, `did not say "ready" within 200ms`, "the mute child's last words"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Expect's error %q does not contain %q", err, want)
		}
	}
	if err := c.Wait(100 * time.Millisecond); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "last words") {
		t.Errorf("Wait of a live child = %v, want ErrTimeout and its output", err)
	}
}

func TestExpectEndedSaysHowAndWhatTheChildWrote(t *testing.T) {
	c := startRole(t, "crash")
	_, err := c.Expect("ready", 30*time.Second)
	if !errors.Is(err, ErrEnded) {
		t.Fatalf("Expect = %v, want ErrEnded", err)
	}
	for _, want := range []string{`before saying "ready"`, "exit status 3", "the crashing child's last words"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Expect's error %q does not contain %q", err, want)
		}
	}
}

func TestExpectOtherWord(t *testing.T) {
	c := startRole(t, "echo")
	_, err := c.Expect("acquired", 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), `said "role echo ", want "acquired"`) {
		t.Fatalf("Expect = %v, want the line it said instead", err)
	}
}

// TestKillReachesTheGroup: the grandchild holds the channel open, so the
// channel ends only when Kill killed it too.
func TestKillReachesTheGroup(t *testing.T) {
	if !Signals {
		t.Skip("no process groups here")
	}
	c := startRole(t, "group")
	if _, err := c.Expect("grandchild", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(30 * time.Second); err == nil {
		t.Fatal("the killed child exited with status 0")
	}
	if _, err := c.Next(10 * time.Second); !errors.Is(err, ErrEnded) {
		t.Fatalf("after Kill, the channel is still open (the grandchild lives): %v", err)
	}
	if err := c.Kill(); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Kill of a reaped child = %v, want os.ErrProcessDone", err)
	}
}

func TestStopCont(t *testing.T) {
	if !Signals {
		t.Skip("no stop signals here")
	}
	c := startRole(t, "echo")
	expect(t, c, "role", "echo ")
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	c.Send("while stopped")
	if line, err := c.Next(300 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("a stopped child answered: %q, %v", line, err)
	}
	if err := c.Cont(); err != nil {
		t.Fatal(err)
	}
	expect(t, c, "echo", "while stopped")
}

// TestNoGoroutineLeft: Close ends every goroutine a child had, whether
// it exited, was left running, or said lines nobody read.
func TestNoGoroutineLeft(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, role := range []string{"echo", "mute", "crash", "group", "chatty"} {
		c, err := Start(Spec{RoleEnv: roleEnv, Role: role, Args: []string{"-test.run=^$"}})
		if err != nil {
			t.Fatal(err)
		}
		if role != "crash" && role != "mute" {
			if _, err := c.Next(30 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestBufferKeepsTheTail(t *testing.T) {
	b := &Buffer{Max: 5}
	fmt.Fprint(b, "abc")
	fmt.Fprint(b, "defg")
	if got := b.String(); got != "cdefg" {
		t.Errorf("Buffer{Max: 5} holds %q, want %q", got, "cdefg")
	}
	var all Buffer
	fmt.Fprint(&all, strings.Repeat("x", 100))
	if len(all.String()) != 100 {
		t.Errorf("Buffer{} kept %d of 100 bytes", len(all.String()))
	}
}

func TestStartNeedsARole(t *testing.T) {
	if _, err := Start(Spec{RoleEnv: roleEnv}); err == nil {
		t.Fatal("Start without a role succeeded")
	}
}
