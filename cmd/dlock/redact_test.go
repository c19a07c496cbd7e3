package main

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/secrettest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// leakPasswords are passwords that broke redaction once: reserved URL
// characters raw and encoded, one-character ones that occur in every
// message, non-ASCII.
var leakPasswords = []string{"p", "1", "pa?ss", "a#b", "p@ss/w:rd", "ü?#/@:%;&x", "a b+c", "50%off", "x?k=v@y", "dlock"}

// withPassword puts pw into u's userinfo, raw or percent-encoded.
func withPassword(u, user, pw string, raw bool) string {
	i := strings.Index(u, "://") + 3
	if j := strings.Index(u[i:], "@"); j >= 0 && !strings.Contains(u[i:i+j], "/") {
		u = u[:i] + u[i+j+1:]
	}
	enc := strings.TrimPrefix(url.UserPassword("", pw).String(), ":")
	if raw {
		enc = pw
	}
	return u[:i] + user + ":" + enc + "@" + u[i:]
}

// redisUser gives the shared Redis server a user lockuser with
// password pw (the default user has none) and returns the server's URL.
func redisUser(t *testing.T, pw string) string {
	s := testenv.Redis(t)
	ctx := testenv.Context(t, 10*time.Second)
	if _, err := testenv.RedisDo(ctx, s.Addr, "ACL", "SETUSER", "lockuser", "reset", "on", ">"+pw, "~*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	return s.URL
}

// writeURLFile writes u to dir/url, mode 0600, as an operator keeps a URL
// for -url-file, and returns its path. One path for every URL, so that
// two runs' messages differ only by what the file holds.
func writeURLFile(t *testing.T, dir, u string) string {
	t.Helper()
	path := filepath.Join(dir, "url")
	if err := os.WriteFile(path, []byte(u+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// pairedStderr runs dlock with u (holding pw) and with base (holding
// secrettest.Other(pw)) and returns both messages. Under load one run may
// hit -no-wait's budget where the other was refused first; such a pair
// compares two different messages, so it is run again, up to three times,
// until both took the same path.
func pairedStderr(t *testing.T, pw string, run func(url string) string, u, base string) (string, string) {
	t.Helper()
	var msg, msgBase string
	for range 3 {
		msg, msgBase = run(u), run(base)
		if secrettest.SameShape(msg, msgBase, pw) {
			break
		}
	}
	return msg, msgBase
}

// TestWrongPasswordNeverShown runs dlock as an operator would, with a
// wrong password in -url and in a -url-file, against the real servers and
// an unreachable port: no dlock.Open error and no line on dlock's stderr
// shows the password.
func TestWrongPasswordNeverShown(t *testing.T) {
	ctx := testenv.Context(t, 5*time.Minute)
	type target struct{ name, url, user string }
	targets := []target{
		{"postgres", testenv.Postgres(t).URL + "&connect_timeout=5", "dlock"},
		{"mysql", testenv.MySQL(t).URL + "?timeout=5s", "dlock"},
		{"redis", redisUser(t, "right-pw"), "lockuser"},
	}
	targets = append(targets,
		target{"zk-unreachable", "zk://127.0.0.1:1/dlock?connect_timeout=200ms", "u"},
		target{"redlock-unreachable", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0?node_timeout=20ms", ""},
		target{"postgres-unreachable", "postgres://127.0.0.1:1/db?connect_timeout=1", "u"},
		target{"mysql-unreachable", "mysql://127.0.0.1:1/db?timeout=1s", "u"})
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			dir := t.TempDir()
			// An unreachable service is given -wait 30s rather than
			// -no-wait's 1 s budget: the driver's own error (its
			// connect_timeout, 1 s at most) then ends every run, where
			// under CI's load a budget of 1 s ended some runs and not
			// their baselines, two messages that cannot be compared.
			wait := []string{"-no-wait"}
			if strings.HasSuffix(tg.name, "-unreachable") {
				wait = []string{"-wait", "30s"}
			}
			for _, pw := range leakPasswords {
				for _, raw := range []bool{false, true} {
					u, base := withPassword(tg.url, tg.user, pw, raw), withPassword(tg.url, tg.user, secrettest.Other(pw), raw)
					_, err := dlock.Open(ctx, u)
					_, errBase := dlock.Open(ctx, base)
					if err == nil || errBase == nil {
						if !strings.Contains(tg.name, "red") { // Redis connects on first use
							t.Errorf("Open(%q) with a wrong password: %v / %v", u, err, errBase)
						}
					} else if secrettest.Leaks(err.Error(), errBase.Error(), pw) {
						t.Errorf("Open(%q): error shows the password %q: %v\nbase: %v", u, pw, err, errBase)
					}
					stderr, stderrBase := pairedStderr(t, pw, func(url string) string {
						_, _, stderr := runDlock(t, ctx, os.Environ(), slices.Concat([]string{"run", "-v"}, wait, []string{"-url", url, "job", "--", "true"})...)
						return stderr
					}, u, base)
					if secrettest.Leaks(stderr, stderrBase, pw) || stderr == "" {
						t.Errorf("dlock run -url %q: stderr shows the password %q:\n%s\nbase:\n%s", u, pw, stderr, stderrBase)
					}
					stderr, stderrBase = pairedStderr(t, pw, func(url string) string {
						_, _, stderr := runDlock(t, ctx, os.Environ(), slices.Concat([]string{"run", "-v"}, wait, []string{"-url-file", writeURLFile(t, dir, url), "job", "--", "true"})...)
						return stderr
					}, u, base)
					if secrettest.Leaks(stderr, stderrBase, pw) || stderr == "" {
						t.Errorf("dlock run -url-file holding %q: stderr shows the password %q:\n%s\nbase:\n%s", u, pw, stderr, stderrBase)
					}
				}
			}
		})
	}
}

// TestChildEnvHasNoSecret: COMMAND's environment carries DLOCK_URL
// redacted, with neither the password nor a secret parameter.
func TestChildEnvHasNoSecret(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	type target struct {
		url     string
		secrets []string
	}
	ru := redisUser(t, "r!ght?pw")
	targets := []target{
		{testenv.Postgres(t).URL + "&sslpassword=s3cretKEY%3F", []string{testenv.Password, "s3cretKEY"}},
		{withPassword(ru, "lockuser", "r!ght?pw", false), []string{"r!ght?pw", "r%21ght%3Fpw", "ght"}},
		{withPassword(ru, "lockuser", "r!ght?pw", true), []string{"r!ght?pw", "ght"}},
	}
	for i, tg := range targets {
		dir := t.TempDir()
		out := filepath.Join(dir, "env")
		code, _, stderr := runDlock(t, ctx, os.Environ(), "run", "-no-wait", "-url", tg.url, "job", "--", "sh", "-c", "env > "+out)
		if code != 0 {
			t.Fatalf("target %d: status %d: %s", i, code, stderr)
		}
		env, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(env), envURL+"=") {
			t.Errorf("no %s in COMMAND's environment", envURL)
		}
		for _, s := range tg.secrets {
			if strings.Contains(string(env), s) {
				t.Errorf("COMMAND's environment shows the secret %q:\n%s", s, env)
			}
		}
	}
}
