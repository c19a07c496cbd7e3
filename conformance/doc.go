// Package conformance is dlock's conformance suite: the rules every
// backend must pass, exported so that the author of a third-party driver
// can prove theirs with the same suite as dlock's own drivers.
//
// # Using it
//
// Write a Harness in your driver's test: it opens independent Lockers
// (each a separate client: its own connection or session) on one backend
// namespace, says which URL a child process can open to reach the same
// namespace, and implements the optional fault hooks (Revoker,
// Disconnector, Restarter, Residue) that the backend allows. Then call Run
// from a test:
//
//	type harness struct{ url string }
//
//	func (h harness) NewLocker(ctx context.Context) (*dlock.Locker, error) { return dlock.Open(ctx, h.url) }
//	func (h harness) URL() string                                          { return h.url }
//	func (h harness) Close() error                                         { return nil }
//
//	// Revoke drops the current lease of name, as a failing server would.
//	func (h harness) Revoke(ctx context.Context, name string) error { ... }
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(ctx context.Context) (conformance.Harness, error) {
//			return harness{url: startOrShareServer(t)}, nil // a fresh key prefix per call is best
//		})
//	}
//
// Each case runs as a subtest named after it (go test -run
// 'TestConformance/KeepAlive'), with a fresh Harness, lock names of its own
// (a random suffix), and a watchdog. A case whose capability or hook is
// missing is skipped with the reason. Check runs the same cases without a
// *testing.T and returns every failure joined in a *Report (as
// testing/fstest.TestFS does), so a test can assert that a broken driver
// fails; Evaluate returns the Report of any run.
//
// Timing bounds are relative: each case first times a TryAcquire on a free
// name (one round trip), and a bound is a multiple of it plus a fixed
// slack (WithSlack, 250ms by default), plus what the backend's
// Capabilities allow: the portable layer's 100ms backoff cap for polling
// backends, its 1s fallback timer for notified waiters that must notice
// an expiry nobody announced, the lease TTL or ReleaseOnCrash for a dead
// holder. Safety checks (overlaps, tokens, a freed lock of a new holder)
// have no slack. The base TTL is short (WithTTL, 1s by default), so the
// suite takes well under a minute on a real backend.
//
// # Cross-process cases
//
// CrossProcessCrash and PausedHolderFenced re-execute the test binary (the
// top-level test that called Run, with -test.run) as child processes that
// dlock.Open the Harness's URL. The child's first call of Run, Check or
// Evaluate plays the child's role and exits the process, so start
// servers inside the HarnessMaker, not before Run, and do not do anything
// in TestMain that a child must not repeat. The parent keeps the fenced
// Register; a child's writes reach it over a pipe. Outside go test these
// cases are skipped.
//
// # Fenced resource
//
// Register is a resource that rejects writes with a stale fencing token;
// History records acquires, releases, losses and writes; CheckFenced runs
// github.com/anishathalye/porcupine over a history with the fenced-mutex
// model (FencedModel) and, on a violation, writes porcupine's HTML
// visualisation and names the file. Use them in your own tests of code
// that holds locks.
//
// # Cases
//
//   - TryAcquireHeld: TryAcquire on a free name succeeds; on a held name it
//     returns an error wrapping ErrNotAcquired at once (within a small
//     multiple of one round trip), without waiting for the holder.
//   - AcquireWakesAfterRelease: Acquire blocks while the lock is held and
//     returns within a bound after the holder releases: at once for a queue or
//     a notification, within the portable layer's 100ms backoff cap for
//     polling.
//   - AcquireHonoursContext: Acquire returns the context's error promptly when
//     its deadline passes or it is cancelled, and leaves nothing behind: the
//     next acquirer gets the lock as soon as the holder releases it, and no
//     server-side object of the cancelled waiter remains.
//   - MutualExclusion: At most one client holds a name at a time: 8 lockers ×
//     8 goroutines acquiring one name see no overlap, lose no update of an
//     unsynchronised counter, and their history (grants, fenced writes,
//     releases) is explained by the fenced-mutex model.
//   - ConcurrentTryAcquireOneWinner: Of 100 concurrent TryAcquire calls on a
//     free name, exactly one succeeds and every other returns ErrNotAcquired.
//   - SameLockerContention: Goroutines of one Locker never compete with each
//     other on the server: of 10 concurrent TryAcquire calls of one Locker on a
//     free name exactly one succeeds; 16 goroutines of one Locker acquiring and
//     releasing one name see at most one holder at a time and are all granted;
//     waiters of that Locker cancelled while a sibling holds the name leave
//     nothing behind, and the name is free for another client at once
//     afterwards.
//   - IndependentNames: Distinct names are distinct locks: holding one (even a
//     prefix, a case variant or an extension of another) never blocks another.
//   - ReleaseSemantics: Release by the holder frees the lock and ends the
//     lease with ErrReleased; a second Release returns ErrNotHeld; the Release
//     of a lease that expired or was revoked returns ErrNotHeld and does not
//     free the lock that a new holder took since.
//   - RefreshSemantics: Refresh keeps the lock past its original TTL; Refresh
//     of a lease that expired or was revoked returns ErrNotHeld and does not
//     resurrect the lock.
//   - KeepAlive: With keep-alive a lease stays held for 5 × TTL without an
//     explicit refresh; with NoKeepAlive it expires on the server after its
//     TTL and another client gets it within the TTL plus the waiter's notice
//     bound.
//   - ExpiryHandOver: When an unrefreshed lease expires, exactly one other
//     client gets the lock: a client polling with TryAcquire around the expiry
//     is granted it no earlier than the holder's lease deadline and within the
//     TTL plus slack, and a third client is then excluded.
//   - FencingMonotonic: Fencing tokens strictly increase across successive
//     holders of a name: across lockers, across Acquire and TryAcquire, across
//     expiry or revocation, and across a server restart where the backend
//     keeps them.
//   - LossSignalled: When the server drops a lease, Done closes and Err wraps
//     ErrLockLost within the keep-alive interval (TTL/3) plus slack; a lease
//     that expires unrefreshed ends (its deadline passes) no later than the
//     server grants the lock to another client; a holder cut off from the
//     server is told before another client is granted the lock.
//   - Reentrancy: With an Owner, a second Acquire by the same Owner on the
//     same Locker returns at once and must be released twice; other owners,
//     and the same Owner on another Locker (another client), are excluded
//     until the last release.
//   - Fairness: On a fair backend waiters are granted the lock in the order
//     they started waiting.
//   - CrossProcessCrash: A holder process killed with SIGKILL frees the lock
//     within the backend's stated bound (Capabilities.ReleaseOnCrash: at once,
//     the TTL, or the session timeout) plus the waiter's notice bound.
//   - PausedHolderFenced: A holder process stopped (SIGSTOP) until another
//     client took the lock, then resumed, has its write with its old token
//     rejected by the fenced resource, and its lease reported lost
//     (ErrLockLost); on a TTL-bound backend, Err, Done and the lease's
//     Context already say so in the first instant after it resumes, before
//     any of its timers has run.
//   - BadInput: Empty, over-long and invalid-UTF-8 names, and names the
//     backend cannot store, are rejected with ErrInvalidName; a negative TTL
//     or one below the portable minimum with ErrInvalidOption (zero means the
//     default); nothing is left on the server; every name that is accepted is
//     stored exactly (distinct names never collide).
//   - TTLRange: The backend declares the TTL range it honours
//     (Capabilities.MinTTL and MaxTTL): a TTL just outside it, or the largest
//     duration, is refused with ErrInvalidOption and leaves nothing on the
//     server; a lease with the longest TTL and no keep-alive stays exclusive
//     (no overflow, rounding or truncation on the way to the server frees it
//     early); on a TTL-bound backend a lease with the shortest TTL and no
//     keep-alive holds until its Done closes, and the server frees it within
//     the waiter's notice bound after that.
//   - Close: After Close, calls return ErrClosed, acquisitions in flight end
//     with ErrClosed, leases end with ErrClosed and are released on the server
//     (they stop renewing), a second Close is harmless, and nothing panics.
//
// # Semaphore cases
//
// The cases named Semaphore… check counting semaphores (Locker.Semaphore)
// on every backend whose Capabilities.MaxPermits is above zero, and are
// skipped with that reason elsewhere. They use a few permits (2 or 3) and
// short waits; their timing bounds follow Capabilities.SemaphoreWait as
// the lock cases' follow Wait. SemaphoreLimit and SemaphoreCrashFreesPermit
// start child processes (with the semaphore's name and number in their
// environment) as the cross-process lock cases do, and skip that part
// where those are skipped.
//
//   - SemaphoreLimit: At most N clients hold permits of a semaphore of N at
//     once: N clients each get one with TryAcquire and the next is refused
//     with ErrNotAcquired; 4 lockers × 3 goroutines acquiring and releasing
//     permits of one name never see more than N holders, and their history
//     (grants, fenced writes, releases) is explained by the fenced-semaphore
//     model; across processes, of N child processes and the parent asking for
//     N permits, N hold and the last is granted only when the parent
//     releases.
//   - SemaphoreFencing: Fencing tokens strictly increase across all the
//     permits granted for a name: across lockers, across TryAcquire and
//     Acquire, while other permits are held, and under concurrent
//     acquisitions (no token is ever given twice).
//   - SemaphoreCrashFreesPermit: A dead holder's permit comes back within the
//     backend's bound: on a TTL-bound backend a permit that is never
//     refreshed nor released is granted to another client no earlier than its
//     lease deadline and within its TTL plus the waiter's notice bound, with
//     a higher token; a holder process killed with SIGKILL frees its permit
//     within Capabilities.ReleaseOnCrash plus the notice bound.
//   - SemaphoreCancelLeavesNothing: A cancelled semaphore Acquire leaves
//     nothing behind: while all N permits are held it returns the context's
//     error promptly (deadline or cancel), a permit freed afterwards goes to
//     a waiter that came later, and once the holders release another client
//     takes all N permits at once.
//   - SemaphoreWakes: A waiter blocked on a semaphore whose permits are all
//     held is granted one within a bound after a holder releases: at once for
//     a queue or a notification (Capabilities.SemaphoreWait), within the
//     portable layer's 100ms backoff cap for polling.
//   - SemaphoreMismatchedPermits: Two clients that disagree on N get an
//     error, not two limits: while permits of a semaphore of N are held, an
//     attempt naming another number fails with ErrInvalidOption (Acquire too,
//     without waiting) and changes nothing (the holders keep their permits,
//     exactly the free ones can be taken); once every permit is free, the new
//     number applies.
//   - SemaphoreOnePermit: A semaphore of one permit behaves as a lock: one
//     holder at a time, another client's TryAcquire is refused and its
//     Acquire waits for the release, and the next grant has a higher token.
//   - SemaphoreBadInput: Locker.Semaphore refuses a number of permits below 1
//     or above Capabilities.MaxPermits with ErrInvalidOption and a bad name
//     with ErrInvalidName; a permit asked for with an Owner or a bad TTL is
//     refused with ErrInvalidOption before any server call (even with a
//     context already cancelled); nothing is left held.
//   - SemaphoreLockIndependent: A semaphore and a lock of the same name are
//     independent: holding the lock takes no permit, holding every permit
//     does not hold the lock.
package conformance
