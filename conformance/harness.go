package conformance

import (
	"context"
	"time"

	"github.com/dlock-go/dlock"
)

// Harness gives the suite access to one backend namespace. A driver's test
// implements it; each case gets a fresh Harness from the HarnessMaker and
// closes it at the end.
type Harness interface {
	// NewLocker opens a new client (its own connection or session) on the
	// shared namespace. Two Lockers from one Harness stand for two
	// separate clients. The suite closes every Locker it gets.
	NewLocker(ctx context.Context) (*dlock.Locker, error)
	// URL returns a URL that a child process can pass to dlock.Open to
	// reach the same namespace, or "" when there is none (the
	// cross-process cases are then skipped).
	URL() string
	// Close releases what the Harness holds. The suite has closed every
	// Locker it got before.
	Close() error
}

// HarnessMaker returns a fresh Harness. It is called once per case. Start
// servers inside it (or share one per test binary), not before calling
// Run: a cross-process case re-executes the test binary, and the child
// returns from Run before it calls the HarnessMaker.
type HarnessMaker func(ctx context.Context) (Harness, error)

// Optional fault hooks. A Harness implements those its backend can do;
// cases (or parts of cases) that need a missing hook are skipped with the
// reason.

// Revoker is a Harness whose server can drop the current lease of a name
// as a failing server would: Redis DEL, expiring the ZooKeeper session of
// the holder, pg_terminate_backend or KILL of the holder's connection. The
// holder is not told directly; it must find out (Lease.Done closes with
// ErrLockLost). Revoke returns an error when the name is not held. It must
// work for a holder in another process too.
type Revoker interface {
	Revoke(ctx context.Context, name string) error
}

// Disconnector is a Harness that can cut one Locker's connection(s) to the
// server, as a network failure would. The Locker stays open; its leases
// must be reported lost before the server could grant the lock to another
// client.
type Disconnector interface {
	Disconnect(ctx context.Context, l *dlock.Locker) error
}

// Restarter is a Harness that can kill and restart its server, data kept.
// It is used to check that fencing tokens keep increasing across a restart
// on backends whose Capabilities say TokensSurviveRestart.
type Restarter interface {
	RestartServer(ctx context.Context) error
}

// Residue is a Harness that can count the server-side objects of a name
// that are not a live holder: queued ZooKeeper znodes, waiter rows, a
// memory driver's queued waiters. It must be 0 after a cancelled Acquire.
type Residue interface {
	Residue(ctx context.Context, name string) (int, error)
}

// Option configures Run and Check.
type Option func(*config)

type config struct {
	ttl       time.Duration
	slack     time.Duration
	rounds    int
	watchdog  time.Duration
	skip      map[string]string
	reportDir string
	logf      func(format string, args ...any)
	// childTest is the top-level test a child process runs (-test.run).
	childTest string
}

func newConfig(opts []Option) *config {
	c := &config{
		ttl:    time.Second,
		slack:  250 * time.Millisecond,
		rounds: 4,
		skip:   map[string]string{},
	}
	for _, o := range opts {
		o(c)
	}
	if c.watchdog == 0 {
		c.watchdog = max(30*time.Second, 40*c.ttl)
	}
	return c
}

// WithTTL sets the base lease length of the suite (default 1s). Cases
// hold locks for small multiples of it (KeepAlive holds for 5×TTL), so
// it sets the suite's run time; it must be long enough for a keep-alive
// refresh (every TTL/3) to reach the server reliably on a loaded machine
// (with 500ms, a keep-alive starved for 330ms by a busy 2-core machine
// under -race loses its lease).
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithSlack sets the fixed allowance added to every timing bound (default
// 250ms), on top of a multiple of the round trip measured in the case.
// Raise it on a slow or loaded machine; it never relaxes a safety check.
func WithSlack(d time.Duration) Option { return func(c *config) { c.slack = d } }

// WithRounds sets the rounds per goroutine of MutualExclusion (default 4:
// 8 lockers × 8 goroutines × 4 rounds = 256 critical sections).
func WithRounds(n int) Option { return func(c *config) { c.rounds = max(n, 1) } }

// WithWatchdog sets the time after which a case that has not finished is
// reported failed (default max(30s, 40×TTL)).
func WithWatchdog(d time.Duration) Option { return func(c *config) { c.watchdog = d } }

// WithSkip skips the named cases (reported as skipped, with reason).
func WithSkip(reason string, names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			c.skip[n] = reason
		}
	}
}

// WithReportDir sets the directory that receives porcupine's HTML
// visualisation of a history that fails the fenced-mutex check (default:
// a new directory under os.TempDir).
func WithReportDir(dir string) Option { return func(c *config) { c.reportDir = dir } }

// WithLog sends the cases' progress lines to logf (Run sends them to the
// subtest's t.Logf; Check discards them by default).
func WithLog(logf func(format string, args ...any)) Option {
	return func(c *config) { c.logf = logf }
}
