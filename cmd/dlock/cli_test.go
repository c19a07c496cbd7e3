package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// These tests need no server: usage errors, and what happens around
// COMMAND on the in-process mem:// backend.

func TestUsageErrors(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	cases := []struct {
		name string
		env  []string // DLOCK_URL=...
		args []string
		want string // in the one-line message
	}{
		{"no subcommand", nil, nil, "missing subcommand"},
		{"unknown subcommand", nil, []string{"lock"}, `unknown subcommand "lock"`},
		{"no URL", nil, []string{"run", "job", "--", "true"}, "give -url URL or set DLOCK_URL"},
		{"empty DLOCK_URL", []string{"DLOCK_URL="}, []string{"run", "job", "--", "true"}, "give -url URL or set DLOCK_URL"},
		{"not a URL", nil, []string{"run", "-url", "localhost:6379", "job", "--", "true"}, "malformed URL"},
		{"unknown scheme", nil, []string{"run", "-url", "etcd://u:sekrit@127.0.0.1:2379", "job", "--", "true"}, `unknown URL scheme "etcd"`},
		{"unknown parameter", nil, []string{"run", "-url", "mem://?password=sekrit&colour=red", "job", "--", "true"}, "unknown URL parameter"},
		{"bad DLOCK_URL", []string{"DLOCK_URL=nope"}, []string{"run", "job", "--", "true"}, "malformed URL"},
		{"wait and no-wait", nil, []string{"run", "-url", "mem://", "-wait", "1s", "-no-wait", "job", "--", "true"}, "exclude each other"},
		{"zero wait", nil, []string{"run", "-url", "mem://", "-wait", "0s", "job", "--", "true"}, "positive duration"},
		{"zero ttl", nil, []string{"run", "-url", "mem://", "-ttl", "0s", "job", "--", "true"}, "-ttl 0s"},
		{"negative grace", nil, []string{"run", "-url", "mem://", "-grace", "-1s", "job", "--", "true"}, "-grace -1s"},
		{"bad duration", nil, []string{"run", "-url", "mem://", "-ttl", "soon", "job", "--", "true"}, "invalid value"},
		{"unknown flag", nil, []string{"run", "-url", "mem://", "-n", "job", "--", "true"}, "-n"},
		{"no name", nil, []string{"run", "-url", "mem://"}, "missing lock NAME"},
		{"no command", nil, []string{"run", "-url", "mem://", "job", "--"}, "missing COMMAND"},
		{"flag after name", nil, []string{"run", "-url", "mem://", "job", "-no-wait", "--", "true"}, "flags go before NAME"},
		{"empty name", nil, []string{"run", "-url", "mem://", "", "--", "true"}, "invalid lock name"},
		{"status without name", nil, []string{"status", "-url", "mem://"}, "missing lock NAME"},
		{"status two names", nil, []string{"status", "-url", "mem://", "a", "b"}, "want one lock NAME"},
		{"status without URL", nil, []string{"status", "job"}, "give -url URL"},
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
			if strings.Contains(stderr, "sekrit") {
				t.Errorf("stderr shows the password: %q", stderr)
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Errorf("stderr has a stack trace: %q", stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	for _, args := range [][]string{{"help"}, {"-h"}, {"run", "-h"}, {"status", "-help"}} {
		code, stdout, stderr := runDlock(t, ctx, nil, args...)
		if code != 0 || stderr != "" {
			t.Errorf("dlock %v: status %d, stderr %q", args, code, stderr)
		}
		for _, want := range []string{"dlock run [-url URL]", "-no-wait", "-grace", "DLOCK_TOKEN",
			"redis://", "redlock://", "zk://", "postgres://", "mysql://", "dlock status", "75", "76"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("dlock %v: help lacks %q", args, want)
			}
		}
	}
}

// TestCommandOutcomes: COMMAND's status, its death by a signal, a missing
// or unexecutable COMMAND, and its environment, on mem://.
func TestCommandOutcomes(t *testing.T) {
	ctx := testCtx(t, time.Minute)
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
}

// TestParseRun: flags before NAME, "--" optional before COMMAND and kept
// after it.
func TestParseRun(t *testing.T) {
	o, name, command, msg, help := parseRun([]string{"-url", "mem://", "-ttl", "5s", "-wait", "2m", "-grace", "1s", "-v", "job", "--", "ls", "-l", "--", "x"})
	if msg != "" || help {
		t.Fatalf("msg %q help %v", msg, help)
	}
	if o.url != "mem://" || o.ttl != 5*time.Second || o.wait != 2*time.Minute || o.grace != time.Second || !o.verbose || o.noWait {
		t.Errorf("opts = %+v", o)
	}
	if name != "job" || strings.Join(command, " ") != "ls -l -- x" {
		t.Errorf("name %q command %q", name, command)
	}
	// Without "--", COMMAND starts after NAME.
	o, name, command, msg, _ = parseRun([]string{"-no-wait", "job", "ls", "-l"})
	if msg != "" || !o.noWait || o.ttl != dlock.DefaultTTL || o.grace != defaultGrace || name != "job" || strings.Join(command, " ") != "ls -l" {
		t.Errorf("opts %+v name %q command %q msg %q", o, name, command, msg)
	}
}

func TestChildEnv(t *testing.T) {
	base := []string{"PATH=/bin", "DLOCK_URL=postgres://app:sekrit@db/app", "DLOCK_TOKEN=1", "HOME=/root"}
	got := childEnv(base, "n", 42, "postgres://app:sekrit@db/app?strategy=advisory")
	want := []string{"PATH=/bin", "HOME=/root", "DLOCK_NAME=n", "DLOCK_TOKEN=42", "DLOCK_URL=postgres://app:xxxxx@db/app?strategy=advisory"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("childEnv = %q, want %q", got, want)
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
