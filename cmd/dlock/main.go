// Command dlock runs a command while holding a distributed lock: the way to
// make a cron or deploy job run on only one host at a time, like flock(1)
// across machines.
//
//	dlock run [-url-file FILE | -url URL] [-ttl D] [-wait D | -no-wait] [-E CODE] [-grace D] [-n N] [-v] NAME -- COMMAND [ARG...]
//	dlock status [-url-file FILE | -url URL] [-json] [-timeout D] NAME
//	dlock version
//	dlock help [run | status]
//
// "dlock run" acquires the lock NAME on the lock service at URL, runs
// COMMAND with DLOCK_NAME, DLOCK_TOKEN (the lease's fencing token) and
// DLOCK_URL (redacted by driver.Redact: the password and every secret
// parameter, such as sslpassword, replaced by xxxxx, so COMMAND cannot
// reconnect with it) added to its environment, keeps the lease alive while
// COMMAND runs, releases the lock when COMMAND exits and exits with
// COMMAND's status. By default it waits for the lock as long as it takes;
// -wait D gives up after D and -no-wait does not wait at all. Either way a
// lock dlock could not get exits 75, or the CODE of -E CODE (as flock -E).
// A lock service that does not answer is reported (status 69) within the
// budget of the wait: D with -wait D, one second with -no-wait.
//
// With -n N, "dlock run" holds one of the N permits of the counting
// semaphore NAME instead of the lock NAME (as consul lock -n): at most N
// COMMANDs run at once across hosts. Everything else is as for a lock:
// waiting, -wait, -no-wait and -E (75 when every permit is held), the
// keep-alive, the signals, status 76 when the permit is lost. Each permit
// has a fencing token of its own (DLOCK_TOKEN), above those of the permits
// released before it was granted; COMMAND also gets DLOCK_PERMITS=N.
// Semaphores are apart from locks: the semaphore "x" and the lock "x" are
// unrelated. Every dlock of one semaphore must give the same N while any
// permit is held: another N is a usage error (64), as are N < 1, N above
// the backend's maximum, and -n on a backend without semaphores.
//
// A duration D is a number of seconds, as flock -w takes it (5, 0.5), or a
// Go duration (90s, 1m30s, 500ms).
//
// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock are
// forwarded to COMMAND; the lock is released once COMMAND has exited.
// COMMAND runs in its own process group (as under timeout(1)), so that the
// signals reach everything it started; it is therefore not meant to read
// from a terminal. If the lease is lost while COMMAND runs (the server
// expired or revoked it, the session or connection broke), dlock sends
// SIGTERM to COMMAND's process group, SIGKILL after -grace, and exits with
// status 76. If dlock itself dies (SIGKILL), the kernel kills COMMAND's
// process with SIGKILL (on Linux; processes COMMAND started survive it) and
// the lock service frees the lock within its bound: the lease's TTL for
// Redis and for the SQL version strategy, the session timeout for
// ZooKeeper, at once for SQL connection locks.
//
// "dlock status" prints whether NAME is held and, where the backend can
// say, by which owner (host/pid of the dlock that holds it), for how much
// longer, the last fencing token and the number of waiters.
//
// "dlock version" prints the module version dlock was built from and the
// Go version that built it.
//
// # Exit status
//
// Of "dlock run":
//
//	0-125  command      COMMAND's own exit status
//	64     usage        usage error: bad flags or arguments, missing or
//	                    malformed URL, invalid lock name or TTL (EX_USAGE)
//	69     unavailable  the lock service could not be reached or failed
//	                    (EX_UNAVAILABLE)
//	75     busy         the lock is busy: -no-wait found it held, or -wait
//	                    D ran out; COMMAND was not run (EX_TEMPFAIL, as
//	                    flock -n -E 75; -E CODE makes it CODE)
//	76     lost         the lock was lost while COMMAND ran; COMMAND was
//	                    sent SIGTERM (SIGKILL after -grace)
//	126    cannot-exec  COMMAND could not be executed (permission denied,
//	                    ...)
//	127    not-found    COMMAND was not found
//	128+N  signal       COMMAND was killed by signal N (130 for SIGINT,
//	                    143 for SIGTERM); also dlock's own status when
//	                    signal N interrupted it while it was waiting for
//	                    the lock
//
// Whenever the status is dlock's own (not COMMAND's), dlock prints one line
// saying why on standard error. "dlock status" exits 0, 64 or 69.
//
// # URLs
//
// The URL comes from -url-file FILE (the first non-empty line of FILE),
// -url URL or, when neither is given, the DLOCK_URL environment variable.
// Keep a password off the command line: ps shows every process's command
// line to every user of the host, and cron logs each crontab command it
// runs ("CMD (...)" in syslog), so "DLOCK_URL=redis://:PASSWORD@... dlock
// run ..." in a crontab is no better. Put the URL in a file only dlock's
// user can read and give -url-file, or set DLOCK_URL from such a file in
// a script. dlock refuses a -url-file that every user of the host can
// read when the URL in it holds a password or another secret parameter.
//
// The URL names the backend and its options; see the driver packages
// (github.com/dlock-go/dlock/redis, .../zookeeper, .../postgres, .../mysql)
// for every parameter. For example:
//
//	redis://:PASSWORD@10.0.0.5:6379/0
//	redlock://10.0.0.5:6379,10.0.0.6:6379,10.0.0.7:6379
//	zk://zk1:2181,zk2:2181,zk3:2181/dlock
//	postgres://app:PASSWORD@db:5432/app?strategy=advisory
//	mysql://app:PASSWORD@db:3306/app?strategy=getlock
//
// Passwords never appear in dlock's messages or in COMMAND's DLOCK_URL.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Exit statuses of dlock itself; exitStatuses says what each means.
const (
	exitUsage       = 64  // EX_USAGE
	exitUnavailable = 69  // EX_UNAVAILABLE
	exitBusy        = 75  // EX_TEMPFAIL
	exitLost        = 76  // the lease was lost while COMMAND ran
	exitCannotExec  = 126 // as sh(1) and env(1)
	exitNotFound    = 127 // as sh(1) and env(1)
	exitSignalBase  = 128 // 128+N: killed by signal N
)

// exitStatus is one row of the exit-status table.
type exitRow struct {
	status  string // "75", or a range: "0-125", "128+N"
	name    string // a short name for scripts and readers
	meaning string // Markdown: `code` spans lose their backquotes in text
}

// exitStatuses is the one table of the exit statuses of "dlock run". The
// help text is made from it, and TestExitStatusDocs checks the package
// doc, README.md and cmd/dlock/README.md against it (go test -run
// TestExitStatusDocs -update rewrites them).
var exitStatuses = []exitRow{
	{"0-125", "command", "COMMAND's own exit status"},
	{strconv.Itoa(exitUsage), "usage", "usage error: bad flags or arguments, missing or malformed URL, invalid lock name or TTL (`EX_USAGE`)"},
	{strconv.Itoa(exitUnavailable), "unavailable", "the lock service could not be reached or failed (`EX_UNAVAILABLE`)"},
	{strconv.Itoa(exitBusy), "busy", "the lock is busy: `-no-wait` found it held, or `-wait D` ran out; COMMAND was not run (`EX_TEMPFAIL`, as `flock -n -E 75`; `-E CODE` makes it CODE)"},
	{strconv.Itoa(exitLost), "lost", "the lock was lost while COMMAND ran; COMMAND was sent SIGTERM (SIGKILL after `-grace`)"},
	{strconv.Itoa(exitCannotExec), "cannot-exec", "COMMAND could not be executed (permission denied, ...)"},
	{strconv.Itoa(exitNotFound), "not-found", "COMMAND was not found"},
	{strconv.Itoa(exitSignalBase) + "+N", "signal", "COMMAND was killed by signal N (130 for SIGINT, 143 for SIGTERM); also dlock's own status when signal N interrupted it while it was waiting for the lock"},
}

// exitStatusText renders exitStatuses as indented plain text of at most
// width columns, for the help text and the package doc.
func exitStatusText(indent string, width int) string {
	var b strings.Builder
	for _, e := range exitStatuses {
		head := fmt.Sprintf("%s%-6s %-13s", indent, e.status, e.name)
		line := head
		for _, w := range strings.Fields(strings.ReplaceAll(e.meaning, "`", "")) {
			if len(line) > len(head) && len(line)+len(w) > width {
				b.WriteString(strings.TrimRight(line, " ") + "\n")
				line = strings.Repeat(" ", len(head))
			}
			line += w + " "
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	return b.String()
}

// envURL is the environment variable that supplies the URL when neither
// -url nor -url-file is given; the variables COMMAND gets are in run.go.
const envURL = "DLOCK_URL"

func main() {
	os.Exit(cli{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}.main(os.Args[1:]))
}

// cli carries the process's outside world, so that the parsing and
// reporting logic can be tested in-process.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

func (c cli) main(args []string) int {
	if len(args) == 0 {
		return c.usageError("missing subcommand (run, status, version or help)")
	}
	switch args[0] {
	case "run":
		return c.run(args[1:])
	case "status":
		return c.status(args[1:])
	case "version", "-version", "--version":
		fmt.Fprintln(c.stdout, version(debug.ReadBuildInfo()))
		return 0
	case "help", "-h", "-help", "--help":
		switch topic := strings.Join(args[1:], " "); topic {
		case "":
			c.help(c.stdout)
		case "run":
			fmt.Fprint(c.stdout, runUsage())
		case "status":
			fmt.Fprint(c.stdout, statusUsage())
		default:
			return c.usageError(fmt.Sprintf("no help on %q (want dlock help, dlock help run or dlock help status)", topic))
		}
		return 0
	default:
		return c.usageError(fmt.Sprintf("unknown subcommand %q (want run, status, version or help)", args[0]))
	}
}

// version is what "dlock version" prints: the main module's version ("(devel)"
// for a build from a source tree without a version) and the Go version.
func version(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "dlock (unknown version) (" + runtime.Version() + ")"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("dlock %s (%s)", v, bi.GoVersion)
}

// usageError prints a one-line usage error and returns exitUsage.
func (c cli) usageError(msg string) int {
	fmt.Fprintf(c.stderr, "dlock: %s (see dlock help)\n", oneLine(msg))
	return exitUsage
}

// say prints one line on standard error, scrubbed of the URL's secrets.
func (c cli) say(rawURL, format string, args ...any) {
	fmt.Fprintf(c.stderr, "dlock: %s\n", scrub(oneLine(fmt.Sprintf(format, args...)), rawURL))
}

// failf says why dlock exits and returns its exit status, code.
func (c cli) failf(code int, rawURL, format string, args ...any) int {
	c.say(rawURL, format, args...)
	return code
}

// libPrefix is the library's "dlock: " prefix where it starts a message or
// a joined part of one, not the tail of a word such as "redlock: ".
var libPrefix = regexp.MustCompile(`(^|[^\pL\pN_])dlock: `)

// errText is an error's message without the library's "dlock: " prefixes,
// on one line.
func errText(err error) string {
	return oneLine(libPrefix.ReplaceAllString(err.Error(), "$1"))
}

// oneLine joins a multi-line message (errors.Join) with "; ".
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ; ")), " ")
}

// scrub replaces the URL's passwords in s, as a last line of defence: the
// library already keeps them out of its errors.
func scrub(s, rawURL string) string {
	return driver.Scrub(s, rawURL)
}

// urlFlags are the flags that say where the URL is, common to run and
// status.
type urlFlags struct {
	url, file string
}

func (u *urlFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&u.file, "url-file", "", "read the lock service URL from the first non-empty line of `FILE` (keep it readable by dlock's user only)")
	fs.StringVar(&u.url, "url", "", "lock service `URL`; with a password, prefer -url-file or $"+envURL+": ps shows command lines to every user")
}

// maxURLFile bounds what -url-file reads: a URL is one line.
const maxURLFile = 64 << 10

// resolveURL returns the URL from -url, -url-file or DLOCK_URL. Its errors
// are usage errors that never show what the file holds.
func (c cli) resolveURL(u urlFlags) (string, error) {
	switch {
	case u.url != "" && u.file != "":
		return "", errors.New("-url and -url-file exclude each other: give one")
	case u.url != "":
		return u.url, nil
	case u.file != "":
		return readURLFile(u.file)
	}
	if v := c.getenv(envURL); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("no lock service URL: give -url-file FILE or -url URL, or set %s", envURL)
}

// readURLFile reads the URL from the first non-empty line of path. It
// refuses a file that every user can read when the URL holds a secret: a
// group-readable file is an administrator's explicit grant (a 0640 file of
// a "dlock" group), while a world-readable one is the accident of umask
// 022 that -url-file exists to avoid. A warning would not do: under cron
// it would mail every run, and a successful dlock prints nothing of its own.
func readURLFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("-url-file: %v", err) // *PathError: the operation, the path, the cause
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("-url-file: %v", err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("-url-file %s: is a directory, want a file holding the URL", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxURLFile))
	if err != nil {
		return "", fmt.Errorf("-url-file %s: cannot read it: %v", path, errors.Unwrap(err))
	}
	var u string
	for line := range strings.Lines(string(b)) {
		if u = strings.TrimSpace(line); u != "" {
			break
		}
	}
	switch {
	case u == "":
		return "", fmt.Errorf("-url-file %s: no URL in it (want the URL on its first non-empty line)", path)
	case !looksLikeURL(u):
		// dlock.Open would quote a malformed URL: the file may hold a bare
		// password.
		return "", fmt.Errorf("-url-file %s: its first non-empty line is not a URL (want scheme://...)", path)
	case fi.Mode().Perm()&0o004 != 0 && len(driver.Secrets(u)) > 0:
		return "", fmt.Errorf("-url-file %s: every user of the host can read it (mode %04o) and its URL holds a password: chmod o-r %s", path, fi.Mode().Perm(), path)
	}
	return u, nil
}

// looksLikeURL reports whether s starts with an RFC 3986 scheme and "://".
func looksLikeURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok || scheme == "" {
		return false
	}
	for i, r := range scheme {
		letter := 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
		if !letter && (i == 0 || !('0' <= r && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return false
		}
	}
	return true
}

// durationValue is the flag.Value of every duration flag (-ttl, -wait,
// -grace, -timeout): a Go duration (90s, 1m30s) or a number of seconds
// (5, 0.5), as flock -w takes it.
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	if v, err := time.ParseDuration(s); err == nil {
		*d = durationValue(v)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > math.MaxInt64/float64(time.Second) {
		return errors.New("want a number of seconds (5, 0.5) or a duration (90s, 1m30s, 500ms)")
	}
	*d = durationValue(math.Round(f * float64(time.Second)))
	return nil
}

// durationVar defines a duration flag of fs with its default value.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

// openStatus is the exit status for an error from dlock.Open or an
// operation: a usage error for what the user wrote wrong, "unavailable"
// for the service.
func openStatus(err error) int {
	if errors.Is(err, dlock.ErrInvalidOption) || errors.Is(err, dlock.ErrInvalidName) {
		return exitUsage
	}
	return exitUnavailable
}

// openFailure describes an error of dlock.Open: the URL is wrong, or the
// service cannot be reached.
func openFailure(err error) string {
	if openStatus(err) == exitUsage {
		return "bad lock service URL: " + errText(err) + " (see dlock help)"
	}
	return "cannot open the lock service: " + errText(err)
}

// Usage lines and descriptions of the subcommands, shared by "dlock help"
// and "dlock run -h" / "dlock status -h".
const (
	runSynopsis    = "dlock run [flags] NAME -- COMMAND [ARG...]"
	statusSynopsis = "dlock status [flags] NAME"
	runAbout       = `dlock run acquires the lock NAME, runs COMMAND with DLOCK_NAME, DLOCK_TOKEN
(the fencing token, which increases with every holder) and DLOCK_URL (its
password and secret parameters replaced by xxxxx) in its environment, keeps
the lease alive while COMMAND runs, releases the lock when COMMAND exits, and
exits with COMMAND's status. Signals to dlock (INT, TERM, HUP, QUIT, USR1,
USR2) are forwarded to COMMAND's process group. If the lease is lost, COMMAND
gets SIGTERM, then SIGKILL after -grace, and dlock exits 76.

With -n N it holds one of the N permits of the semaphore NAME instead (as
consul lock -n): at most N COMMANDs at once, each with a token of its own and
DLOCK_PERMITS=N; the rest is as for a lock (75 when every permit is held).
Every dlock of a semaphore must give the same N while a permit is held.
`
	statusAbout = `dlock status prints whether the lock NAME is held and, where the backend can
tell, by whom (host/pid), until when, its last fencing token and its waiters.
`
	urlAbout = `The lock service URL comes from -url-file FILE, -url URL or, when neither is
given, $DLOCK_URL. Keep a password off the command line, where ps shows it to
every user of the host: put the URL in a file only dlock's user can read and
give -url-file (dlock refuses a file that every user can read if its URL holds
a password), or set DLOCK_URL.

A duration D is a number of seconds (5, 0.5, as flock -w) or a Go duration
(90s, 1m30s, 500ms).
`
)

// runUsage is the help of "dlock run -h": its usage and flags.
func runUsage() string {
	return "Usage: " + runSynopsis + "\n\n" + runAbout + "\nFlags:\n" + flagDefaults(newRunFlags(nil)) +
		"\n" + urlAbout + "\nExit status: see dlock help.\n"
}

// statusUsage is the help of "dlock status -h": its usage and flags.
func statusUsage() string {
	return "Usage: " + statusSynopsis + "\n\n" + statusAbout + "\nFlags:\n" + flagDefaults(newStatusFlags(nil)) +
		"\n" + urlAbout + "\nExit status: 0, 64 (usage error) or 69 (the lock service failed).\n"
}

func (c cli) help(w io.Writer) {
	fmt.Fprintf(w, `dlock runs a command while holding a distributed lock, so that a cron or
deploy job runs on only one host at a time (flock(1) across machines).

Usage:
  %s
  %s
  dlock version
  dlock help [run | status]

%s
%s
Flags of run:
%s
Flags of status:
%s
%s
URLs, for example (the driver packages document every parameter):
  redis://:PASSWORD@10.0.0.5:6379/0
  redlock://10.0.0.5:6379,10.0.0.6:6379,10.0.0.7:6379
  zk://zk1:2181,zk2:2181,zk3:2181/dlock
  postgres://app:PASSWORD@db:5432/app?strategy=advisory
  mysql://app:PASSWORD@db:3306/app?strategy=getlock
Backends compiled in: %s.

Exit status of run:
%s
dlock prints one line on standard error whenever the status is its own.

Examples (/etc/dlock/redis.url holds redis://:PASSWORD@10.0.0.5:6379/0 and only
dlock's user can read it: create it with install -m 600 /dev/null, then edit it):

  # Redis: run the nightly backup on one host only; the others skip it.
  dlock run -url-file /etc/dlock/redis.url -no-wait -ttl 30s \
      nightly-backup -- /usr/local/bin/backup.sh

  # Redlock over three independent Redis masters (no password: -url is fine).
  dlock run -url redlock://10.0.0.5:6379,10.0.0.6:6379,10.0.0.7:6379 \
      -no-wait report -- ./make-report

  # ZooKeeper: deploys queue up, one at a time, waiting at most 10 minutes.
  export DLOCK_URL=zk://zk1:2181,zk2:2181,zk3:2181/dlock
  dlock run -wait 10m deploy/web -- ./deploy.sh web

  # PostgreSQL advisory lock: freed at once if this host dies.
  dlock run -url-file /etc/dlock/pg.url -no-wait billing-run -- php artisan billing:run

  # MySQL/MariaDB GET_LOCK, the URL in the environment of a script.
  DLOCK_URL=$(cat /etc/dlock/mysql.url) dlock run -wait 1m migrate -- ./migrate up

  # At most 4 exports at once against a fragile API, on every host: one of
  # the 4 permits of the semaphore "exports", waiting up to an hour for one.
  dlock run -url-file /etc/dlock/redis.url -n 4 -wait 1h exports -- ./export.sh

  # Who holds it?
  dlock status -url-file /etc/dlock/redis.url nightly-backup

  # In a crontab, on every host. As flock -w 5 -E 0: wait up to 5 seconds for
  # the lock; a busy lock exits 0 (with one line on standard error).
  */5 * * * * dlock run -url-file /etc/dlock/redis.url -wait 5 -E 0 sync -- /opt/sync.sh
`, runSynopsis, statusSynopsis, runAbout, statusAbout,
		flagDefaults(newRunFlags(nil)), flagDefaults(newStatusFlags(nil)), urlAbout, strings.Join(dlock.Schemes(), ", "),
		strings.TrimSuffix(exitStatusText("  ", 78), "\n"))
}
