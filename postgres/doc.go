// Package postgres is dlock's PostgreSQL driver (with pgx v5 and pgxpool).
// Import it for its side effect of registering the postgres:// and
// postgresql:// URL schemes, or call OpenLocker with an existing pool.
//
// # URLs
//
//	postgres://user:password@host:port/database?strategy=forupdate
//	postgresql://user:password@host:port/database?sslmode=disable&strategy=advisory
//
// Everything but dlock's parameters is handed to pgxpool.ParseConfig, so
// libpq-style hosts, ports and settings work as they do in pgx. dlock's
// parameters:
//
//   - strategy: forupdate (default), version or advisory.
//   - table: the lock table, "table" or "schema.table" (default
//     dlock_locks for forupdate, dlock_locks_<strategy> for the others; see
//     Tables); letters, digits and underscores only.
//   - migrate: create the table and its sequence if missing (default
//     true); with migrate=false they must exist (see Schema).
//
// The other parameters must be ones pgx or pgxpool know: the libpq
// connection keywords (sslmode, sslrootcert, connect_timeout,
// target_session_attrs, application_name, options, …), pgx's
// (statement_cache_capacity, default_query_exec_mode, …) and pgxpool's
// (pool_max_conns, pool_min_conns, pool_max_conn_idle_time, …). Any other
// parameter is an error, as in libpq: pgx would send it to the server as a
// setting, where a misspelt dlock parameter would fail late and obscurely.
// Server settings go through options=-c name=value, or search_path,
// timezone and client_encoding, which are accepted as they are.
// pool_max_conns defaults to 32. Each held forupdate lease pins one
// connection, so a Locker holds at most pool_max_conns forupdate leases at
// once (one more attempt waits for a connection and fails with
// dlock.ErrPoolExhausted when its context ends: see Sessions); advisory
// leases share connections (an advisory lease with an Owner keeps one of
// its own), version leases hold none.
//
// Open connects (and creates the table) before it returns, so a wrong
// address or password fails there. The password never appears in an
// error.
//
// # Strategies
//
//   - forupdate (default): a row of the lock table locked with
//     SELECT … FOR UPDATE (NOWAIT for TryAcquire) in a transaction kept
//     open on a connection pinned for the lease. Waiters wait in the
//     server's row-lock queue; Acquire's wait is bounded by the context's
//     deadline (lock_timeout, which the server ends 20ms before it, so
//     that a wait that times out keeps its connection) and cut short by
//     its cancellation. Release
//     rolls back (nothing is committed, so nothing waits for a flush).
//     The lease's transaction has idle_in_transaction_session_timeout
//     set to the lease TTL: a holder that stops talking (paused,
//     partitioned) loses the lock after the TTL; a holder whose process
//     dies loses it at once (its connection closes). The keep-alive
//     (every TTL/3) pings the pinned connection, which restarts that
//     timer. One round trip per acquire (a pgx batch: BEGIN, the locking
//     SELECT, which takes the token from the sequence and sets the idle
//     timeout for its transaction) and one per release (ROLLBACK). On the
//     connections of a pool opened from a URL, a release also makes the
//     TTL the session's own idle timeout (a SET after the ROLLBACK, in
//     the same round trip), and the next grant of that TTL on the
//     session sets nothing; a session whose value differs from a grant's
//     TTL gets the grant's own, for its transaction. A pool passed in
//     (OpenLocker) keeps its sessions' settings. A held lease pins one
//     connection; a pool of one connection is enough.
//   - version: an optimistic lease row: a conditional UPDATE … WHERE
//     expires_at <= now() takes it (INSERT … ON CONFLICT DO UPDATE for a
//     name the Locker has not found yet, which creates a missing row),
//     with the expiry computed by the server's clock; a TryAcquire that
//     finds it held reads the holder's remaining time with a second
//     statement (RetryAfter), a blocking Acquire queues instead. Refresh
//     and release are conditional on the grant's token. No connection is pinned. Waiters queue in the
//     name's row (column queue: nonce, owner, TTL, the Locker's grant
//     channel and the entry's expiry on the server's clock, in arrival
//     order), and the release hands the lease over in its own statement:
//     one UPDATE frees the row or, when a waiter's entry is live, sets it
//     to that waiter's owner and nonce with a new token and the waiter's
//     TTL from now, and NOTIFYs the waiter's Locker on its own channel
//     (dlock_<table hash>_<Locker id>, one listening connection per
//     Locker, opened in the background at the Locker's first use and
//     closed after 30s without a waiter, since every NOTIFY in the
//     database wakes every listening connection; the next wait opens it
//     again) with "<nonce> <token>": the waiter takes
//     the grant with no request of its own, refreshing it once if it
//     last renewed its entry more than a quarter of its TTL before. A
//     waiter renews its entry every quarter of its TTL (between 10ms and
//     1s; an entry lasts 3s), which also takes a grant whose notification
//     was lost, and, when the holder's lease ended without a release,
//     hands the lock to the first live waiter; a dead waiter's entry
//     expires and is skipped. So waiters are served in arrival order
//     (Capabilities.Fair; a TryAcquire still takes a lease that expired
//     unreleased). A blocking Acquire tries once with TryAcquire's
//     statement and queues only when that fails (it queues at once, with
//     the statement that also takes a free lease, when the name was held
//     at its Locker's last Acquire of it); if its Locker's listener
//     is not running yet (still connecting, or lost), it queues all the
//     same, in its arrival's place, then starts one and renews at once,
//     which takes a grant made meanwhile. A
//     cancelled Acquire takes its entry out and hands on a grant that
//     reached it meanwhile (twice, 100ms apart). A release with nobody
//     queued NOTIFYs nobody (but the waiters of earlier versions of
//     dlock, registered in waiters_until); a release by an earlier
//     version grants nobody, and the queued waiters' renewals take the
//     lock. migrate adds the columns queue and granted_to to a table of
//     an earlier version. A NOTIFY costs more with every listening
//     Locker: PostgreSQL (up to 18) signals at commit every backend that
//     LISTENs in the database, whatever its channels, and each wakes to
//     read the queue (BenchmarkNotifyListeners: a one-row UPDATE that
//     NOTIFYs a channel nobody listens on took 21µs more than the plain
//     UPDATE with no listener, 98µs more with 8, 313µs more with 32).
//     PostgreSQL's development branch (commit 282b1cde9d, for 19) signals
//     only the backends that listen on a notified channel: with one
//     channel per Locker, a grant then wakes the waiter's Locker alone.
//   - advisory: pg_advisory_lock on a pinned connection (the 64-bit key
//     is the first 8 bytes of SHA-256 over the table's and the lock's
//     names: two names collide with probability 2^-64 per pair, and then
//     merely exclude each other). The session sets idle_session_timeout
//     (PostgreSQL 14 or later) to the TTL. The lock, the token, the
//     timeout and the announcement (below) are one statement, and the
//     release is one more, which puts back the session's settings saved
//     in the placeholder variables dlock.idle and dlock.app.
//
// # Guarantees
//
// Every strategy's token comes from the sequence <table>_fence (created
// starting at the server's clock in microseconds, so that a sequence
// dropped and created again goes on above the old one's tokens), whose
// values are never rolled back or reused: a holder whose transaction died
// with its connection cannot share its token with the next holder.
// version also writes the token to the name's row (column fence);
// forupdate and advisory write no row.
//
// forupdate's token is taken in the lease's open transaction, which never
// commits, so its sequence advance may not be on disk when the server
// crashes, and the sequence can come back below it. The UNLOGGED table
// <table>_live is the marker of a server that has not crashed since the
// counter was moved on: every crash recovery empties it (a kill -9 of a
// backend or of the server, an immediate shutdown), and a standby promoted
// after a failover has it empty. A forupdate grant takes a token only
// while the marker has its row; otherwise the acquire first runs a
// transaction that moves the sequence on by 2^36 (setval) and inserts the
// row, committed with synchronous_commit on, so that the jump is on disk
// before any session sees the marker. Tokens thus strictly increase
// across crashes and clean restarts (which flush the sequence), as long
// as the server issued fewer than 2^36 tokens that were not on disk at
// the crash (or that a promoted standby had not received), and a standby
// promoted after a failover is as current as its replication made it.
// Clients of an earlier release of dlock, which made each forupdate
// token durable with a commit of its own, must not share a forupdate
// table with this one: after a crash they take tokens without moving the
// sequence on.
//
// TTLs (Capabilities.MinTTL and MaxTTL): forupdate accepts 50ms to
// 2147483647ms and advisory 5ms to 2147483647ms (the idle timeouts are
// int32 milliseconds);
// version accepts 5ms to 10 years. A TTL outside is ErrInvalidOption
// before any server call. When a forupdate or advisory lease ends for its
// holder (its deadline passed unrefreshed) the driver closes its
// connection at that moment, so the server frees the lock then. A
// cancelled version attempt whose reply was lost is undone by a clean-up
// keyed by a nonce the attempt wrote to the row. The driver never ends a
// backend by its pid (after a restart a pid may be another client's): it
// cancels with the backend's own secret key and closes its connection.
//
// A lease is not bound to the server's clock but to its connection: a
// broken connection is a lost lease (Lease.Done closes as soon as the
// keep-alive finds it). Capabilities.SessionBound is false all the same:
// the server frees a silent holder after its idle timeout, which the TTL
// sets, so the portable layer's TTL deadline is the right, conservative
// bound for the holder (every statement on the pinned connection restarts
// the server's timer).
//
// # Sessions
//
// forupdate pins a pool connection per lease (the row lock lives in its
// transaction, and one transaction's row locks cannot be freed one by
// one). advisory leases share connections: one session holds the
// advisory locks of many leases, a lease frees only its own (never
// pg_advisory_unlock_all or a RESET while another lease holds on the
// session), two leases of one name on one Locker never stack on one
// session, and a session that breaks ends exactly the leases on it (Done
// for each). A blocking Acquire waits on a connection of its own (the
// one the Locker keeps without leases, with no try first; else the one
// its try left unused; else a new one), which is shared once granted,
// without a round trip. An attempt whose context ends while it waits for
// a connection of a full pool fails with dlock.ErrPoolExhausted,
// wrapping the context's error. The session's idle_session_timeout, which frees
// a silent holder's locks within its TTL, is set at its first grant and
// put back when the connection returns to the pool; leases of different
// TTLs do not share a session. So a Locker holds as many advisory leases
// as it likes on a small pool (TestSharedSessions: 200 on 8 connections).
//
// # Inspect
//
// Locker.Inspect (dlock status) reports, on every strategy, whether the
// lock is held, its holder's AcquireOptions.Owner and token, and its
// waiters (version: the live entries of the row's queue; the others: the
// sessions queued for it).
// forupdate and advisory find the holder's session in pg_locks (for
// forupdate, the transaction that locked the row) and read its owner and
// token from its application_name, which a grant sets, in the statement
// that takes the token, to "dlock <token> <owner>" (for the transaction
// on forupdate; until the release on advisory, which then resets it):
// pg_stat_activity shows it too. Only a lease with an Owner announces
// itself (on advisory it keeps a connection of its own for it: see
// Sessions); a lease without one is reported held, with its owner and
// token unknown (setting application_name would cost every grant). The server keeps at most 63 bytes of it,
// in printable ASCII (other bytes become '?'): a longer owner is reported
// cut. A free lock's fence is the row's on version (the last committed
// grant's) and unknown on forupdate and advisory, whose grants write no
// row.
// Only version knows the lease's remaining TTL; a pinned lease lasts as
// long as its holder's keep-alive.
//
// # Semaphores
//
// Every strategy has counting semaphores (Locker.Semaphore, up to 1000
// permits: Capabilities.MaxPermits). A semaphore lives in the table
// <table>_sem beside the lock table (created with it by migrate; claimed
// with it for one strategy), so the semaphore "x" and the lock "x" never
// meet: a header row (slot 0) stores the number of permits N, and slot
// rows 1 to N are the permits.
//
//   - forupdate: a permit is a slot row locked FOR UPDATE SKIP LOCKED in a
//     transaction kept open on a pinned connection, with the header row
//     locked FOR SHARE; it is freed with the connection, as a lock is.
//   - advisory: a permit is one of N advisory locks, taken with
//     pg_try_advisory_lock on a pinned connection that holds the header's
//     key shared. The keys are the two-int4 form (int4, int4) of a 64-bit
//     hash of (table, name, slot): a key space apart from the locks'
//     bigint keys, so no semaphore's key is a lock's.
//   - version: a permit is a slot row leased by the server's clock (owner,
//     token, expiry), taken when free or expired; a crashed holder's permit
//     comes back after its TTL.
//
// The server cannot queue "any of N", but it can notify: on every
// strategy the release of a permit NOTIFYs the table's channel (after the
// rollback, on forupdate), which the semaphore's waiters LISTEN to, as
// version's lock waiters do (Capabilities.SemaphoreWait is notify). A
// permit freed by its holder's crash notifies nobody: the waiters' fallback
// timer (50ms, growing to 1s) finds it. None is fair. Tokens come from the
// sequence <table>_fence, as the strategy's lock tokens do (forupdate's
// with the same crash marker): they strictly increase across all the
// permits of a name, and after a crash of the server.
//
// N is stored in the header. An attempt naming another N changes it only
// when no permit is held (forupdate: no session holds the header FOR
// SHARE, tried with FOR UPDATE NOWAIT; advisory: the header's key is free
// for an exclusive try; version: no slot's lease is in force, read under
// the header's row lock); otherwise it fails with ErrInvalidOption and
// changes nothing. Slot rows beyond the stored N are never taken. With
// migrate=false, create <table>_sem as migrate does (see Migrate in
// dialect.go) to use semaphores.
//
// # Tables
//
// One table serves one strategy: a row lock, a lease row and an advisory
// lock do not see each other, so two strategies on one table would both
// hold one name. The first Locker to use a table records its strategy in
// it (the row of the empty name, which is no lock name); a Locker of
// another strategy on that table fails with ErrInvalidOption. Without a
// table parameter (or with table=dlock_locks) forupdate uses dlock_locks
// and the others dlock_locks_version and dlock_locks_advisory. Table names
// are unquoted identifiers, folded to lower case as PostgreSQL folds them
// ("Locks" is locks), and resolved by the server (search_path) before
// anything is derived from them: table=locks and table=public.locks are
// one table and one set of advisory keys.
package postgres
