package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// These tests need no server: usage errors, and what happens around
// COMMAND on the in-process mem:// backend.

func TestUsageErrors(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return path
	}
	emptyFile := file("empty", "\n  \n\t\n", 0o600)
	bareSecret := file("bare", "\n  sekrit-pw\nredis://127.0.0.1:1/0\n", 0o600)
	worldReadable := file("world", "redis://:sekrit@127.0.0.1:1/0\n", 0o644)
	worldSecretParam := file("world-param", "postgres://app@db/app?sslpassword=sekrit\n", 0o604)
	cases := []struct {
		name string
		env  []string // DLOCK_URL=...
		args []string
		want string // in the one-line message
	}{
		{"no subcommand", nil, nil, "missing subcommand"},
		{"unknown subcommand", nil, []string{"lock"}, `unknown subcommand "lock"`},
		{"help on nothing", nil, []string{"help", "lock"}, `no help on "lock"`},
		{"no URL", nil, []string{"run", "job", "--", "true"}, "give -url-file FILE or -url URL, or set DLOCK_URL"},
		{"empty DLOCK_URL", []string{"DLOCK_URL="}, []string{"run", "job", "--", "true"}, "give -url-file FILE or -url URL, or set DLOCK_URL"},
		{"url and url-file", nil, []string{"run", "-url", "mem://", "-url-file", emptyFile, "job", "--", "true"}, "-url and -url-file exclude each other"},
		{"url-file missing", nil, []string{"run", "-url-file", filepath.Join(dir, "nope"), "job", "--", "true"}, "-url-file: open " + filepath.Join(dir, "nope") + ": no such file"},
		{"url-file a directory", nil, []string{"run", "-url-file", dir, "job", "--", "true"}, "is a directory"},
		{"url-file empty", nil, []string{"run", "-url-file", emptyFile, "job", "--", "true"}, "-url-file " + emptyFile + ": no URL in it"},
		{"url-file holds no URL", nil, []string{"run", "-url-file", bareSecret, "job", "--", "true"}, "its first non-empty line is not a URL"},
		{"url-file world-readable with a password", nil, []string{"run", "-url-file", worldReadable, "job", "--", "true"}, "every user of the host can read it (mode 0644) and its URL holds a password: chmod o-r"},
		{"url-file world-readable with a secret parameter", nil, []string{"status", "-url-file", worldSecretParam, "job"}, "(mode 0604)"},
		{"url-file and a bad DLOCK_URL", []string{"DLOCK_URL=sekrit"}, []string{"run", "-url-file", emptyFile, "job", "--", "true"}, "no URL in it"},
		{"not a URL", nil, []string{"run", "-url", "localhost:6379", "job", "--", "true"}, "malformed URL"},
		{"unknown scheme", nil, []string{"run", "-url", "consul://u:sekrit@127.0.0.1:8500", "job", "--", "true"}, `unknown URL scheme "consul"`},
		{"unknown parameter", nil, []string{"run", "-url", "mem://?password=sekrit&colour=red", "job", "--", "true"}, "unknown URL parameter"},
		{"bad DLOCK_URL", []string{"DLOCK_URL=nope"}, []string{"run", "job", "--", "true"}, "malformed URL"},
		{"wait and no-wait", nil, []string{"run", "-url", "mem://", "-wait", "1s", "-no-wait", "job", "--", "true"}, "exclude each other"},
		{"zero wait", nil, []string{"run", "-url", "mem://", "-wait", "0s", "job", "--", "true"}, "positive duration"},
		{"zero wait in seconds", nil, []string{"run", "-url", "mem://", "-wait", "0", "job", "--", "true"}, "-wait 0s: want a positive duration"},
		{"negative wait in seconds", nil, []string{"run", "-url", "mem://", "-wait", "-1.5", "job", "--", "true"}, "-wait -1.5s: want a positive duration"},
		{"bad wait", nil, []string{"run", "-url", "mem://", "-wait", "5x", "job", "--", "true"}, `invalid value "5x" for flag -wait: want a number of seconds (5, 0.5) or a duration (90s, 1m30s, 500ms)`},
		{"bad timeout", nil, []string{"status", "-url", "mem://", "-timeout", "NaN", "job"}, `invalid value "NaN" for flag -timeout`},
		{"zero timeout", nil, []string{"status", "-url", "mem://", "-timeout", "0", "job"}, "-timeout 0s: want a positive duration"},
		{"E too large", nil, []string{"run", "-url", "mem://", "-E", "256", "job", "--", "true"}, "-E 256: want an exit status from 0 to 255"},
		{"E negative", nil, []string{"run", "-url", "mem://", "-E", "-1", "job", "--", "true"}, "-E -1: want an exit status from 0 to 255"},
		{"E not a number", nil, []string{"run", "-url", "mem://", "-E", "busy", "job", "--", "true"}, `invalid value "busy" for flag -E`},
		{"zero ttl", nil, []string{"run", "-url", "mem://", "-ttl", "0s", "job", "--", "true"}, "-ttl 0s"},
		{"negative grace", nil, []string{"run", "-url", "mem://", "-grace", "-1s", "job", "--", "true"}, "-grace -1s"},
		{"bad duration", nil, []string{"run", "-url", "mem://", "-ttl", "soon", "job", "--", "true"}, "invalid value"},
		{"unknown flag", nil, []string{"run", "-url", "mem://", "-x", "job", "--", "true"}, "-x"},
		{"zero permits", nil, []string{"run", "-url", "mem://", "-n", "0", "job", "--", "true"}, "-n 0: want a number of permits of at least 1"},
		{"negative permits", nil, []string{"run", "-url", "mem://", "-n", "-2", "job", "--", "true"}, "-n -2: want a number of permits of at least 1"},
		{"permits not a number", nil, []string{"run", "-url", "mem://", "-n", "four", "job", "--", "true"}, `invalid value "four" for flag -n`},
		{"permits above the maximum", nil, []string{"run", "-url", "mem://", "-n", "1000000000", "job", "--", "true"}, "-n 1000000000: memory (in-process) allows at most 1048576 permits"},
		{"no name", nil, []string{"run", "-url", "mem://"}, "missing lock NAME"},
		{"no command", nil, []string{"run", "-url", "mem://", "job", "--"}, "missing COMMAND"},
		{"flag after name", nil, []string{"run", "-url", "mem://", "job", "-no-wait", "--", "true"}, "flags go before NAME"},
		{"empty name", nil, []string{"run", "-url", "mem://", "", "--", "true"}, "invalid lock name"},
		{"status without name", nil, []string{"status", "-url", "mem://"}, "missing lock NAME"},
		{"status two names", nil, []string{"status", "-url", "mem://", "a", "b"}, "want one lock NAME"},
		{"status without URL", nil, []string{"status", "job"}, "give -url-file FILE or -url URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := append(withoutVar(os.Environ(), envURL), tc.env...)
			code, stdout, stderr := runDlock(t, ctx, env, tc.args...)
			if code != exitUsage {
				t.Errorf("status %d, want %d (usage); stderr %q", code, exitUsage, stderr)
			}
			oneLineMsg(t, stderr, tc.want)
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if strings.Contains(stderr, "sekrit") || strings.Contains(stdout, "sekrit") {
				t.Errorf("stderr shows the password: %q", stderr)
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Errorf("stderr has a stack trace: %q", stderr)
			}
		})
	}
}

// inProcess runs the CLI in this process, for what ends before COMMAND
// would start (usage errors, help, version), with env as its environment.
func inProcess(env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = cli{stdout: &out, stderr: &errOut, getenv: func(k string) string { return env[k] }}.main(args)
	return code, out.String(), errOut.String()
}

// TestHelp: "dlock help" is the whole text; "dlock run -h" and "dlock
// help run" are run's usage and flags only, and likewise for status.
func TestHelp(t *testing.T) {
	runFlags := []string{"-url-file FILE", "-url URL", "-ttl D", "-wait D", "-no-wait", "-E CODE", "-grace D", "-n N", "-v"}
	statusFlags := []string{"-url-file FILE", "-url URL", "-json", "-timeout D"}
	whole := append([]string{"dlock run [flags] NAME -- COMMAND", "dlock status [flags] NAME", "dlock version", "DLOCK_TOKEN",
		"ps shows", "-url-file /etc/dlock/redis.url", "redis://", "redlock://", "zk://", "postgres://", "mysql://",
		"Exit status of run:", "75", "76"}, runFlags...)
	cases := []struct {
		args      []string
		want, not []string
	}{
		{[]string{"help"}, whole, nil},
		{[]string{"-h"}, whole, nil},
		{[]string{"--help"}, whole, nil},
		{[]string{"run", "-h"}, append([]string{"Usage: dlock run [flags] NAME -- COMMAND", "DLOCK_TOKEN", "ps shows", "number of seconds"}, runFlags...),
			[]string{"-json", "-timeout", "dlock status", "Examples", "Exit status of run"}},
		{[]string{"help", "run"}, []string{"Usage: dlock run [flags] NAME -- COMMAND"}, []string{"-json", "dlock status"}},
		{[]string{"run", "-url", "mem://", "-help", "job", "--", "true"}, []string{"Usage: dlock run"}, []string{"-json"}},
		{[]string{"status", "-h"}, append([]string{"Usage: dlock status [flags] NAME", "ps shows"}, statusFlags...),
			[]string{"-no-wait", "-grace", "-E CODE", "dlock run", "COMMAND", "Examples"}},
		{[]string{"help", "status"}, []string{"Usage: dlock status [flags] NAME"}, []string{"-no-wait"}},
	}
	for _, tc := range cases {
		code, stdout, stderr := inProcess(nil, tc.args...)
		if code != 0 || stderr != "" {
			t.Errorf("dlock %v: status %d, stderr %q", tc.args, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("dlock %v: help lacks %q", tc.args, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(stdout, w) {
				t.Errorf("dlock %v: help shows %q, which is not of this subcommand:\n%s", tc.args, w, stdout)
			}
		}
	}
	// No example puts a password on a command line: only -url-file or
	// DLOCK_URL carry one.
	_, help, _ := inProcess(nil, "help")
	for _, line := range strings.Split(help, "\n") {
		if strings.Contains(line, "PASSWORD") && (strings.Contains(line, "dlock run") || strings.Contains(line, "dlock status") || strings.Contains(line, "-url ")) {
			t.Errorf("help shows a password on a command line: %q", line)
		}
	}
}

// TestVersion: "dlock version" prints the module's version and Go's, from
// the build information; a source build says (devel).
func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/dlock-go/dlock", Version: "v0.1.0"}}
	if got, want := version(bi, true), "dlock v0.1.0 (go1.26.0)"; got != want {
		t.Errorf("version = %q, want %q", got, want)
	}
	bi.Main.Version = "(devel)"
	if got, want := version(bi, true), "dlock (devel) (go1.26.0)"; got != want {
		t.Errorf("version = %q, want %q", got, want)
	}
	if got := version(nil, false); !strings.HasPrefix(got, "dlock (unknown version) (go") {
		t.Errorf("version without build info = %q", got)
	}
	// The built binary, as an operator runs it.
	ctx := testenv.Context(t, time.Minute)
	want := regexp.MustCompile(`^dlock (v\S+|\(devel\)) \(go1\.[0-9][^)]*\)\n$`)
	for _, arg := range []string{"version", "-version", "--version"} {
		code, stdout, stderr := runDlock(t, ctx, nil, arg)
		if code != 0 || stderr != "" || !want.MatchString(stdout) {
			t.Errorf("dlock %s: status %d, stdout %q, stderr %q; want stdout matching %v", arg, code, stdout, stderr, want)
		}
	}
}

// TestCommandOutcomes: COMMAND's status, its death by a signal, a missing
// or unexecutable COMMAND, and its environment, on mem://.
func TestCommandOutcomes(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		command []string
		want    int
		msg     string // one-line message expected ("" for none)
	}{
		{"success", []string{"true"}, 0, ""},
		{"failure", []string{"sh", "-c", "exit 7"}, 7, ""},
		{"status 125", []string{"sh", "-c", "exit 125"}, 125, ""},
		{"killed by SIGKILL", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
		{"killed by SIGUSR1", []string{"sh", "-c", "kill -USR1 $$"}, 128 + int(syscall.SIGUSR1), ""},
		{"not found", []string{"no-such-command-for-dlock"}, exitNotFound, "cannot run no-such-command-for-dlock"},
		{"not found by path", []string{filepath.Join(dir, "missing")}, exitNotFound, "cannot run"},
		{"not executable", []string{notExec}, exitCannotExec, "permission denied"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "-url", "mem://", "job", "--"}, tc.command...)
			code, _, stderr := runDlock(t, ctx, nil, args...)
			if code != tc.want {
				t.Errorf("status %d, want %d; stderr %q", code, tc.want, stderr)
			}
			if tc.msg == "" && stderr != "" {
				t.Errorf("stderr = %q, want nothing (the status is COMMAND's)", stderr)
			}
			if tc.msg != "" {
				oneLineMsg(t, stderr, tc.msg)
			}
		})
	}

	t.Run("environment", func(t *testing.T) {
		env := append(jobEnv(dir, "env", envExit+"=3", envHold+"=0s"), envName+"=inherited", envToken+"=999")
		args := append([]string{"run", "-url", "mem://", "-v", "reports/daily"}, jobCommand()...)
		code, _, stderr := runDlock(t, ctx, env, args...)
		if code != 3 {
			t.Fatalf("status %d, want 3; stderr %q", code, stderr)
		}
		got := waitFile(t, ctx, filepath.Join(dir, "env.env"))
		want := "DLOCK_NAME=reports/daily\nDLOCK_TOKEN=1\nDLOCK_URL=mem://\n"
		if got != want {
			t.Errorf("COMMAND's environment:\n%s\nwant:\n%s", got, want)
		}
		if !strings.Contains(stderr, `acquired lock "reports/daily" (fence 1`) || !strings.Contains(stderr, "released") {
			t.Errorf("-v: stderr = %q, want acquire and release lines", stderr)
		}
	})

	// -n: a permit of the semaphore, apart from the lock of that name.
	t.Run("semaphore", func(t *testing.T) {
		env := jobEnv(dir, "sem", envHold+"=0s")
		args := append([]string{"run", "-url", "mem://", "-n", "3", "-v", "reports/daily"}, jobCommand()...)
		code, _, stderr := runDlock(t, ctx, env, args...)
		if code != 0 {
			t.Fatalf("status %d, want 0; stderr %q", code, stderr)
		}
		got := waitFile(t, ctx, filepath.Join(dir, "env.sem"))
		want := "DLOCK_NAME=reports/daily\nDLOCK_TOKEN=1\nDLOCK_URL=mem://\nDLOCK_PERMITS=3\n"
		if got != want {
			t.Errorf("COMMAND's environment:\n%s\nwant:\n%s", got, want)
		}
		if !strings.Contains(stderr, `acquired a permit of semaphore "reports/daily" (fence 1`) || !strings.Contains(stderr, `released a permit of semaphore "reports/daily"`) {
			t.Errorf("-v: stderr = %q, want acquire and release lines", stderr)
		}
	})
}

// TestParseRun: flags before NAME, "--" optional before COMMAND and kept
// after it; every duration flag takes seconds or a Go duration.
func TestParseRun(t *testing.T) {
	o, name, command, msg, help := parseRun([]string{"-url", "mem://", "-ttl", "5s", "-wait", "2m", "-grace", "1s", "-E", "0", "-v", "job", "--", "ls", "-l", "--", "x"})
	if msg != "" || help {
		t.Fatalf("msg %q help %v", msg, help)
	}
	if o.url.url != "mem://" || o.ttl != 5*time.Second || o.wait != 2*time.Minute || o.grace != time.Second || o.busy != 0 || !o.verbose || o.noWait {
		t.Errorf("opts = %+v", o)
	}
	if name != "job" || strings.Join(command, " ") != "ls -l -- x" {
		t.Errorf("name %q command %q", name, command)
	}
	// Without "--", COMMAND starts after NAME; the defaults.
	o, name, command, msg, _ = parseRun([]string{"-no-wait", "job", "ls", "-l"})
	if msg != "" || !o.noWait || o.ttl != dlock.DefaultTTL || o.grace != defaultGrace || o.busy != exitBusy || name != "job" || strings.Join(command, " ") != "ls -l" {
		t.Errorf("opts %+v name %q command %q msg %q", o, name, command, msg)
	}
	// Seconds, as flock -w takes them, in every duration flag.
	o, _, _, msg, _ = parseRun([]string{"-url-file", "/f", "-ttl", "5", "-wait", "0.5", "-grace", "2.25", "job", "true"})
	if msg != "" || o.url.file != "/f" || o.ttl != 5*time.Second || o.wait != 500*time.Millisecond || o.grace != 2250*time.Millisecond {
		t.Errorf("seconds: opts %+v msg %q", o, msg)
	}
	var so statusOpts
	if err := newStatusFlags(&so).Parse([]string{"-timeout", "3"}); err != nil || so.timeout != 3*time.Second {
		t.Errorf("status -timeout 3: %v, %v", so.timeout, err)
	}
}

// TestRunArity: the message names what is missing; everything after the
// "--" that ends the flags is COMMAND.
func TestRunArity(t *testing.T) {
	cases := []struct {
		args    []string
		name    string // want; "" when msg is wanted
		command string
		msg     string
	}{
		{nil, "", "", "missing lock NAME and COMMAND"},
		{[]string{"-url", "X"}, "", "", "missing lock NAME and COMMAND"},
		{[]string{"-url", "X", "--"}, "", "", "missing lock NAME and COMMAND"},
		{[]string{"-url", "X", "--", "true"}, "", "", `missing lock NAME: it goes before --, and "true" after -- is COMMAND`},
		{[]string{"--", "true", "-x"}, "", "", "missing lock NAME: it goes before --"},
		{[]string{"-v", "--", "job", "--", "true"}, "", "", `missing lock NAME: it goes before --, and "job" after -- is COMMAND`},
		{[]string{"-url", "X", "job"}, "", "", "missing COMMAND: dlock run [flags] job -- COMMAND"},
		{[]string{"-url", "X", "job", "--"}, "", "", "missing COMMAND: dlock run [flags] job -- COMMAND"},
		{[]string{"-url", "X", "job", "-no-wait", "--", "true"}, "", "", `"-no-wait" after NAME: flags go before NAME`},
		{[]string{"-url", "X", "job", "true"}, "job", "true", ""},
		{[]string{"-url", "X", "job", "--", "true"}, "job", "true", ""},
		{[]string{"-url", "X", "job", "--", "--", "x"}, "job", "-- x", ""},
		{[]string{"-url", "X", "job", "--", "-x"}, "job", "-x", ""},
		{[]string{"-url=--", "job", "true"}, "job", "true", ""},
		// A "--" that is a flag's value does not end the flags.
		{[]string{"-url", "--", "job", "true"}, "job", "true", ""},
		{[]string{"-v", "job", "sh", "-c", "exit 3"}, "job", "sh -c exit 3", ""},
	}
	for _, tc := range cases {
		_, name, command, msg, _ := parseRun(tc.args)
		if tc.msg != "" {
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("dlock run %q: msg %q, want %q", tc.args, msg, tc.msg)
			}
			continue
		}
		if msg != "" || name != tc.name || strings.Join(command, " ") != tc.command {
			t.Errorf("dlock run %q: name %q command %q msg %q, want name %q command %q", tc.args, name, command, msg, tc.name, tc.command)
		}
	}
	// The message reaches the operator as a usage error.
	code, _, stderr := inProcess(nil, "run", "-url", "mem://", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, "missing lock NAME") {
		t.Errorf("dlock run -url mem:// -- true: status %d, stderr %q", code, stderr)
	}
}

// TestDurationValue: a number of seconds or a Go duration.
func TestDurationValue(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"5", 5 * time.Second, true},
		{"0.5", 500 * time.Millisecond, true},
		{".25", 250 * time.Millisecond, true},
		{"1e3", 1000 * time.Second, true},
		{"0", 0, true},
		{"-1", -time.Second, true},
		{"90s", 90 * time.Second, true},
		{"1m30s", 90 * time.Second, true},
		{"500ms", 500 * time.Millisecond, true},
		{"", 0, false},
		{"soon", 0, false},
		{"5 s", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"1e300", 0, false},
	}
	for _, tc := range cases {
		var d durationValue
		err := d.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && time.Duration(d) != tc.want) {
			t.Errorf("Set(%q) = %v, %v; want %v, ok %v", tc.in, time.Duration(d), err, tc.want, tc.ok)
		}
	}
}

// TestURLSources: -url, then -url-file, then DLOCK_URL; -url-file takes
// the first non-empty line, trimmed. COMMAND's DLOCK_URL says which URL
// dlock used (mem://NAME).
func TestURLSources(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "url")
	if err := os.WriteFile(urlFile, []byte("\n \t\n  mem://from-file  \r\nmem://second-line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A world-readable file without a secret is fine.
	public := filepath.Join(dir, "public")
	if err := os.WriteFile(public, []byte("mem://public"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(public, 0o644)
	cases := []struct {
		env  string // DLOCK_URL
		args []string
		want string
	}{
		{"mem://from-env", []string{"-url", "mem://from-flag"}, "mem://from-flag"},
		{"mem://from-env", []string{"-url-file", urlFile}, "mem://from-file"},
		{"mem://from-env", nil, "mem://from-env"},
		{"", []string{"-url-file", public}, "mem://public"},
	}
	for _, tc := range cases {
		args := append(append([]string{"run"}, tc.args...), "job", "--", "sh", "-c", `printf %s "$DLOCK_URL"`)
		env := withoutVar(os.Environ(), envURL)
		if tc.env != "" {
			env = append(env, envURL+"="+tc.env)
		}
		code, stdout, stderr := runDlock(t, ctx, env, args...)
		if code != 0 || stdout != tc.want {
			t.Errorf("dlock %q with DLOCK_URL=%q: status %d, URL %q, want %q; stderr %q", args, tc.env, code, stdout, tc.want, stderr)
		}
	}
	// dlock status reads it too.
	code, stdout, stderr := runDlock(t, ctx, nil, "status", "-url-file", urlFile, "job")
	if code != 0 || !strings.Contains(stdout, "held:    no") {
		t.Errorf("dlock status -url-file: status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestErrText: the library's "dlock: " prefixes go, and nothing else.
func TestErrText(t *testing.T) {
	err := errors.Join(errors.New("dlock: try-acquire \"x\": redis: redlock: 3 of 3 nodes failed"), errors.New("dlock: open: (dlock: nested)"))
	if got, want := errText(err), `try-acquire "x": redis: redlock: 3 of 3 nodes failed ; open: (nested)`; got != want {
		t.Errorf("errText = %q, want %q", got, want)
	}
}

func TestChildEnv(t *testing.T) {
	base := []string{"PATH=/bin", "DLOCK_URL=postgres://app:sekrit@db/app", "DLOCK_TOKEN=1", "HOME=/root"}
	got := childEnv(base, "n", 42, "postgres://app:sekrit@db/app?strategy=advisory", 0)
	want := []string{"PATH=/bin", "HOME=/root", "DLOCK_NAME=n", "DLOCK_TOKEN=42", "DLOCK_URL=postgres://app:xxxxx@db/app?strategy=advisory"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("childEnv = %q, want %q", got, want)
	}
	// With -n, DLOCK_PERMITS too; an inherited one is dropped without.
	base = append(base, "DLOCK_PERMITS=9")
	got = childEnv(base, "n", 42, "mem://", 4)
	want = []string{"PATH=/bin", "HOME=/root", "DLOCK_NAME=n", "DLOCK_TOKEN=42", "DLOCK_URL=mem://", "DLOCK_PERMITS=4"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("childEnv with permits = %q, want %q", got, want)
	}
	if got := childEnv(base, "n", 42, "mem://", 0); slices.Contains(got, "DLOCK_PERMITS=9") {
		t.Errorf("childEnv of a lock kept an inherited DLOCK_PERMITS: %q", got)
	}
}

func TestStatusReport(t *testing.T) {
	caps := dlock.Capabilities{Backend: "redis", Strategy: "set-nx"}
	cases := []struct {
		name string
		rep  statusReport
		text []string
		json string
	}{
		{"held, all known", newStatusReport("job", caps, dlock.Info{Held: true, Owner: "web1/42", TTL: 1500 * time.Millisecond, Fence: 7, Waiters: 2}),
			[]string{"held:    yes", "owner:   web1/42", "expires: in 1.5s", "fence:   7 (", "waiters: 2"},
			`{"name":"job","backend":"redis","strategy":"set-nx","session_bound":false,"held":true,"owner":"web1/42","ttl_ms":1500,"fence":7,"waiters":2}`},
		{"held, little known", newStatusReport("job", caps, dlock.Info{Held: true, Waiters: -1}),
			[]string{"held:    yes", "owner:   unknown", "expires: unknown", "fence:   unknown", "waiters: unknown"},
			`{"name":"job","backend":"redis","strategy":"set-nx","session_bound":false,"held":true,"owner":null,"ttl_ms":null,"fence":null,"waiters":null}`},
		{"free", newStatusReport("job", caps, dlock.Info{Fence: 9}),
			[]string{"held:    no", "fence:   9 (", "waiters: 0"},
			`{"name":"job","backend":"redis","strategy":"set-nx","session_bound":false,"held":false,"owner":"","ttl_ms":0,"fence":9,"waiters":0}`},
	}
	unsupported, err := inspectReport("job", caps, dlock.Info{}, fmt.Errorf("dlock: inspect: %w", dlock.ErrUnsupported))
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct {
		name string
		rep  statusReport
		text []string
		json string
	}{"unsupported", unsupported,
		[]string{"held:    unknown (this backend cannot inspect", "owner:   unknown", "expires: unknown", "fence:   unknown", "waiters: unknown"},
		`{"name":"job","backend":"redis","strategy":"set-nx","session_bound":false,"held":null,"owner":null,"ttl_ms":null,"fence":null,"waiters":null}`})
	if _, err := inspectReport("job", caps, dlock.Info{}, dlock.ErrClosed); err == nil {
		t.Error("inspectReport hid an error other than ErrUnsupported")
	}
	for _, tc := range cases {
		var b bytes.Buffer
		tc.rep.print(&b)
		for _, w := range tc.text {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: text lacks %q:\n%s", tc.name, w, b.String())
			}
		}
		j, _ := json.Marshal(tc.rep)
		if string(j) != tc.json {
			t.Errorf("%s: json\n%s\nwant\n%s", tc.name, j, tc.json)
		}
	}
}

// closedPort returns a local TCP address nothing listens on: connecting to
// it is refused at once.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRefusedWithinBudget: a lock service that refuses connections is
// reported with status 69 and one line within the budget of the wait: the
// client libraries' own retries (go-redis redials a refused connection
// for 1.7s, the ZooKeeper client until connect_timeout, 10s) do not
// outlast -no-wait's second or -wait's D. The bound leaves room for a
// loaded machine and a -race binary.
func TestRefusedWithinBudget(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	addr := closedPort(t)
	const bound = 2500 * time.Millisecond
	cases := []struct {
		url  string
		wait []string
	}{
		{"redis://" + addr + "/0", []string{"-no-wait"}},
		{"redis://" + addr + "/0", []string{"-wait", "0.5"}},
		{"redlock://" + addr + "," + addr + "," + addr + "/0", []string{"-no-wait"}},
		{"zk://" + addr + "/dlock", []string{"-no-wait"}},
		{"zk://" + addr + "/dlock", []string{"-wait", "500ms"}},
		{"postgres://app:sekrit@" + addr + "/app", []string{"-no-wait"}},
		{"mysql://app:sekrit@" + addr + "/app", []string{"-no-wait"}},
	}
	for _, tc := range cases {
		args := append(append([]string{"run"}, tc.wait...), "job", "--", "true")
		env := append(withoutVar(os.Environ(), envURL), envURL+"="+tc.url)
		start := time.Now()
		code, _, stderr := runDlock(t, ctx, env, args...)
		elapsed := time.Since(start)
		t.Logf("%s %v: %v, %s", tc.url, tc.wait, elapsed.Round(time.Millisecond), strings.TrimSpace(stderr))
		if code != exitUnavailable {
			t.Errorf("%s %v: status %d, want %d; stderr %q", tc.url, tc.wait, code, exitUnavailable, stderr)
		}
		oneLineMsg(t, stderr, "COMMAND not run")
		if strings.Contains(stderr, "sekrit") || strings.Contains(stderr, "busy") {
			t.Errorf("%s %v: stderr %q", tc.url, tc.wait, stderr)
		}
		if elapsed > bound {
			t.Errorf("%s %v: reported after %v, want within %v", tc.url, tc.wait, elapsed, bound)
		}
	}
}

// TestBusyStatus: a busy lock exits 75, or the CODE of -E CODE, for
// -no-wait and for a -wait that ran out, on a real Redis whose URL (with
// a password) is in a -url-file.
func TestBusyStatus(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	dir := t.TempDir()
	file := writeURLFile(t, dir, withPassword(redisUser(t, "busy-pw"), "lockuser", "busy-pw", false))
	holder := startDlock(t, ctx, jobEnv(dir, "holder"), append([]string{"run", "-url-file", file, "busy-job"}, jobCommand()...)...)
	holder.waitStarted(t, ctx, dir, "holder")
	cases := []struct {
		flags []string
		want  int
		msg   string
	}{
		{[]string{"-no-wait"}, exitBusy, `lock "busy-job" is busy (held by `},
		{[]string{"-no-wait", "-E", "0"}, 0, `lock "busy-job" is busy`},
		{[]string{"-no-wait", "-E", "1"}, 1, `lock "busy-job" is busy`},
		{[]string{"-wait", "0.3"}, exitBusy, `gave up waiting for lock "busy-job" after 300ms`},
		{[]string{"-wait", "0.3", "-E", "255"}, 255, "gave up waiting"},
	}
	for _, tc := range cases {
		args := append(append([]string{"run", "-url-file", file}, tc.flags...), "busy-job", "--", "sh", "-c", "echo ran")
		code, stdout, stderr := runDlock(t, ctx, nil, args...)
		if code != tc.want || stdout != "" {
			t.Errorf("dlock %q: status %d, stdout %q, want status %d and COMMAND not run; stderr %q", args, code, stdout, tc.want, stderr)
		}
		oneLineMsg(t, stderr, tc.msg)
		if strings.Contains(stderr, "busy-pw") {
			t.Errorf("stderr shows the password: %q", stderr)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t, time.Minute); code != 0 {
		t.Errorf("holder: status %d; stderr %q", code, holder.stderr)
	}
}
