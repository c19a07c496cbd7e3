// Command dlock runs a command while holding a distributed lock: the way to
// make a cron or deploy job run on only one host at a time, like flock(1)
// across machines.
//
//	dlock run [-url URL] [-ttl D] [-wait D | -no-wait] [-grace D] [-v] NAME -- COMMAND [ARG...]
//	dlock status [-url URL] [-json] [-timeout D] NAME
//	dlock help
//
// "dlock run" acquires the lock NAME on the lock service at URL (-url, or
// the DLOCK_URL environment variable), runs COMMAND with DLOCK_NAME,
// DLOCK_TOKEN (the lease's fencing token) and DLOCK_URL (redacted by
// driver.Redact: the password and every secret parameter, such as
// sslpassword, replaced by xxxxx, so COMMAND cannot reconnect with it)
// added to its environment, keeps the lease alive while
// COMMAND runs, releases the lock when COMMAND exits and exits with
// COMMAND's status. By default it waits for the lock as long as it takes;
// -wait D gives up after D and -no-wait does not wait at all.
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
// # Exit status
//
// Of "dlock run":
//
//	0-125  COMMAND's exit status
//	64     usage error: bad flags or arguments, missing or malformed URL,
//	       invalid lock name or TTL (EX_USAGE)
//	69     the lock service could not be reached or failed (EX_UNAVAILABLE)
//	75     the lock is busy: -no-wait found it held, or -wait D ran out
//	       (EX_TEMPFAIL, as flock -n -E 75)
//	76     the lock was lost while COMMAND ran; COMMAND was sent SIGTERM
//	       (SIGKILL after -grace)
//	126    COMMAND could not be executed (permission denied, ...)
//	127    COMMAND was not found
//	128+N  COMMAND was killed by signal N (130 for SIGINT, 143 for SIGTERM);
//	       also dlock's own status when signal N interrupted it while it
//	       was waiting for the lock
//
// Whenever the status is dlock's own (not COMMAND's), dlock prints one line
// saying why on standard error. "dlock status" exits 0, 64 or 69.
//
// # URLs
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
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Exit statuses of dlock itself (see the package doc).
const (
	exitUsage       = 64  // EX_USAGE
	exitUnavailable = 69  // EX_UNAVAILABLE
	exitBusy        = 75  // EX_TEMPFAIL
	exitLost        = 76  // the lease was lost while COMMAND ran
	exitCannotExec  = 126 // as sh(1) and env(1)
	exitNotFound    = 127 // as sh(1) and env(1)
	exitSignalBase  = 128 // 128+N: killed by signal N
)

// envURL is the environment variable that supplies the URL when -url is
// not given; the variables COMMAND gets are in run.go.
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
		return c.usageError("missing subcommand (run or status)")
	}
	switch args[0] {
	case "run":
		return c.run(args[1:])
	case "status":
		return c.status(args[1:])
	case "help", "-h", "-help", "--help":
		c.help(c.stdout)
		return 0
	default:
		return c.usageError(fmt.Sprintf("unknown subcommand %q (want run or status)", args[0]))
	}
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

// errText is an error's message without the library's "dlock: " prefix, on
// one line.
func errText(err error) string {
	return oneLine(strings.ReplaceAll(err.Error(), "dlock: ", ""))
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

// resolveURL returns the URL from the -url flag or DLOCK_URL.
func (c cli) resolveURL(flagURL string) (string, error) {
	u := flagURL
	if u == "" {
		u = c.getenv(envURL)
	}
	if u == "" {
		return "", fmt.Errorf("no lock service URL: give -url URL or set %s", envURL)
	}
	return u, nil
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

func (c cli) help(w io.Writer) {
	fmt.Fprintf(w, `dlock runs a command while holding a distributed lock, so that a cron or
deploy job runs on only one host at a time (flock(1) across machines).

Usage:
  dlock run [-url URL] [-ttl D] [-wait D | -no-wait] [-grace D] [-v] NAME -- COMMAND [ARG...]
  dlock status [-url URL] [-json] [-timeout D] NAME
  dlock help

dlock run acquires the lock NAME, runs COMMAND with DLOCK_NAME, DLOCK_TOKEN
(the fencing token, which increases with every holder) and DLOCK_URL (its
password and secret parameters replaced by xxxxx) in its environment, keeps the lease alive while
COMMAND runs, releases the lock when COMMAND exits, and exits with COMMAND's
status. Signals to dlock (INT, TERM, HUP, QUIT, USR1, USR2) are forwarded to
COMMAND's process group. If the lease is lost, COMMAND gets SIGTERM, then
SIGKILL after -grace, and dlock exits 76.

Flags of run:
%s
Flags of status:
%s
The URL comes from -url or, when that is not given, from $DLOCK_URL.
Backends compiled in: %s.

Exit status of run:
  0-125  COMMAND's exit status
  64     usage error (bad flags or arguments, missing or malformed URL)
  69     the lock service could not be reached or failed
  75     the lock is busy: -no-wait found it held, or -wait D ran out
  76     the lock was lost while COMMAND ran (COMMAND was terminated)
  126    COMMAND could not be executed; 127: COMMAND was not found
  128+N  COMMAND was killed by signal N (or dlock was, while waiting)
dlock prints one line on standard error whenever the status is its own.

Examples:
  # Redis: run the nightly backup on one host only; the others skip it.
  dlock run -url 'redis://:PASSWORD@10.0.0.5:6379/0' -no-wait -ttl 30s \
      nightly-backup -- /usr/local/bin/backup.sh

  # Redlock over three independent Redis masters.
  dlock run -url redlock://10.0.0.5:6379,10.0.0.6:6379,10.0.0.7:6379 \
      -no-wait report -- ./make-report

  # ZooKeeper: deploys queue up, one at a time, waiting at most 10 minutes.
  export DLOCK_URL=zk://zk1:2181,zk2:2181,zk3:2181/dlock
  dlock run -wait 10m deploy/web -- ./deploy.sh web

  # PostgreSQL advisory lock: freed at once if this host dies.
  dlock run -url 'postgres://app:PASSWORD@db:5432/app?strategy=advisory' \
      -no-wait billing-run -- php artisan billing:run

  # MySQL/MariaDB GET_LOCK.
  dlock run -url 'mysql://app:PASSWORD@db:3306/app?strategy=getlock' \
      -wait 1m migrate -- ./migrate up

  # Who holds it?
  dlock status -url 'redis://:PASSWORD@10.0.0.5:6379/0' nightly-backup

  # In a crontab, on every host:
  */5 * * * * DLOCK_URL=redis://10.0.0.5:6379/0 dlock run -no-wait sync -- /opt/sync.sh
`, flagDefaults(newRunFlags(nil)), flagDefaults(newStatusFlags(nil)), strings.Join(dlock.Schemes(), ", "))
}
