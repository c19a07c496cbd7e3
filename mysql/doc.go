// Package mysql is dlock's MySQL and MariaDB driver (with
// go-sql-driver/mysql over database/sql). Import it for its side effect of
// registering the mysql:// URL scheme, or call OpenLocker with an
// existing *sql.DB.
//
// # URLs
//
//	mysql://user:password@tcp(host:port)/database?strategy=forupdate
//	mysql://user:password@host:port/database?strategy=getlock
//
// The first form is go-sql-driver's DSN behind mysql://. In both, user
// and password may be percent-encoded (a '%' must be written %25), and
// the URL is read as driver.ParseURL reads every dlock URL. dlock's
// parameters:
//
//   - strategy: forupdate (default), version or getlock.
//   - table: the lock table, "table" or "database.table" (default
//     dlock_locks for forupdate, dlock_locks_<strategy> for the others; see
//     Tables); letters, digits and underscores only.
//   - migrate: create the table and its counter if missing (default true).
//
// go-sql-driver's parameters allowed, each validated: the booleans
// allowCleartextPasswords, allowFallbackToPlaintext, allowNativePasswords,
// allowOldPasswords, checkConnLiveness, clientFoundRows,
// columnsWithAlias, compress, rejectReadOnly, interpolateParams,
// parseTime and multiStatements; the durations timeout, readTimeout,
// writeTimeout and timeTruncate; maxAllowedPacket; the names charset (one
// charset), collation, tls and serverPubKey; loc (a time zone name);
// connectionAttributes (key:value,...). allowAllFiles is refused (dlock
// never loads files, and it lets a server read the client's). The
// session variables time_zone ('+00:00', 'SYSTEM' or a zone name),
// sql_mode (a comma-separated list of modes) and transaction_isolation
// (READ-COMMITTED, ...) are accepted only with values of that form,
// quoted or not: go-sql-driver sends them to the server as
// "SET name = value", so anything else could be SQL. Any other parameter
// is an error. dlock sets interpolateParams=true, parseTime=true and
// multiStatements=true (set multiStatements=false to send one statement
// per round trip); a URL that sets a session variable gets
// multiStatements=false, and asking for both is an error.
//
// Open connects (and creates the tables) before it returns. The password
// never appears in an error.
//
// # Strategies
//
//   - forupdate (default): a row of the lock table locked with
//     SELECT … FOR UPDATE (NOWAIT for TryAcquire) in a transaction kept
//     open on a connection pinned for the lease. Waiters wait in InnoDB's
//     row-lock queue; Acquire's wait is bounded by the context's deadline
//     (innodb_lock_wait_timeout, whole seconds: a deadline that the
//     server's timeout does not end first interrupts the wait, which
//     costs its connection) and cut short by its cancellation (the client closes the connection and the driver KILLs
//     its session on the server, so no waiter is left behind; the KILL
//     names the session by a user lock it took when it connected,
//     KILL IS_USED_LOCK(marker), never by a connection id alone, which
//     after a restart of the server may be another client's). Release
//     rolls back (nothing is committed, so nothing waits for a flush).
//     The session's wait_timeout is set to the TTL rounded up to
//     whole seconds: a holder that stops talking loses the lock after it;
//     a holder whose process dies loses it at once; and when a lease ends
//     for its holder (its deadline passed unrefreshed) the driver closes
//     its connection at that moment, so the server frees the lock then,
//     not a second later. The keep-alive (every
//     TTL/3) pings the pinned connection. The token is taken inside the
//     lease's open transaction (see Guarantees for what makes it survive
//     a crash of the server), in the statement that locks the row: a
//     waiter woken by a release has nothing left to run after its wait. A
//     held lease pins one connection; a pool of one connection is
//     enough. The first attempt at a name inserts its
//     row; while another transaction holds an InnoDB gap lock around it (a
//     concurrent first attempt at a neighbouring name), a TryAcquire can
//     return ErrNotAcquired although the name was free, and Acquire waits
//     for that lock.
//   - version: an optimistic lease row whose expiry is computed by the
//     server's clock (UTC_TIMESTAMP(6)); refresh and release are
//     conditional on the grant's token. Waiters poll, with the portable
//     layer's capped, jittered backoff (2ms, doubling to 100ms): MySQL and
//     MariaDB have no LISTEN/NOTIFY, and a held lease pins no connection
//     whose lock a waiter could queue on. The cost: a release wakes
//     nobody, so the lease stays free until a waiter's next attempt, and
//     refused attempts load the server (one hot name, 1ms holds: about 2
//     refused attempts per grant with 8 waiters, 9-10 with 32, and a
//     handover's median 0.7-0.9ms against forupdate's and getlock's
//     0.5ms, dlockbench -quick on a 2-core VM). Pick forupdate or getlock
//     for a contended name. An attempt whose reply is lost (a cancelled
//     context) is undone by a clean-up keyed by a nonce the attempt wrote
//     to the row, so it leaves no lease behind.
//   - getlock: GET_LOCK(name, timeout) on a pinned connection; names
//     longer than 64 characters (GET_LOCK's limit) are replaced by
//     "dlock#" and 58 hex digits of their SHA-256. GET_LOCK's names are
//     server-wide, not per database or table.
//
// A script of statements is sent as one multi-statement (one round trip)
// when the connection allows it.
//
// # Guarantees
//
// The driver is tested on MariaDB and written for MySQL 8 too: it
// refuses (ErrInvalidOption) MariaDB before 10.3 and MySQL before 8.0,
// whose InnoDB recomputes an AUTO_INCREMENT counter at restart (tokens
// would start again), a token counter table not on InnoDB, and a marker
// table (<table>_live) not on MEMORY.
//
// forupdate's token is a value of an AUTO_INCREMENT counter, which InnoDB
// never gives out again while the server runs, though the release rolls
// back the row that took it: a holder whose transaction died with its
// connection cannot share its token with the next holder. A lock's grant
// inserts a row into <table>_grant in its open transaction, in the
// statement that locks the name's row: its id is the token, its other
// columns the owner and session, which Inspect reads (the grant never
// writes the name's row, which the waiters queue on). A semaphore's permit
// takes its token from <table>_fence (kept empty). Both counters are
// created starting at the server's clock in microseconds, so that a
// counter dropped and created again goes on above the old one's tokens.
// A token's counter advance is never committed, so a crash of the server
// can set the counters back below it: the MEMORY table <table>_live is
// the marker of a server that has not restarted since the counters were
// moved on (every restart of the server empties it; its row names the
// server by @@server_id, so a replica promoted after a failover does not
// take its old primary's row for its own). A forupdate grant takes a
// token only while the marker names the server; otherwise the acquire
// first moves both counters on to 2^36 past the larger of them in a
// transaction of its own (committed as durably as
// innodb_flush_log_at_trx_commit makes a commit) and only then writes the
// marker; a <table>_grant created next to an older <table>_fence clears
// the marker, so its tokens start above the older counter's. Tokens thus
// strictly increase across crashes and restarts, as long as the server
// gave out fewer than 2^36 values whose advance was not in the redo log
// on disk at the crash (or on a promoted replica). Clients of an earlier
// version of dlock, which took forupdate lock tokens from <table>_fence
// (and made each one durable with a commit of its own, or recorded their
// holder in <table>_hold), must not share a forupdate table with this
// one: stop them before this one uses the table. With migrate=false,
// create <table>_grant as Migrate does (see dialect.go). version and getlock move the name's row's fence on in the
// grant's own autocommitted statement, to the larger of the last token
// plus one and the server's clock in microseconds, and return it only
// once that statement has committed (as durably as
// innodb_flush_log_at_trx_commit makes a commit): a token is never handed
// out twice, a name's tokens strictly increase whatever the clock does,
// and a row or table dropped and created again goes on above the old
// tokens (unless the clock went back). getlock writes the row in the statement
// whose GET_LOCK granted the lock. Earlier releases of
// dlock took version and getlock tokens from the counter, whose values
// can lie below the clock: stop every client of an earlier release on a
// version or getlock table before a client of this one uses it, or a
// token may go backwards.
//
// TTLs (Capabilities.MinTTL and MaxTTL): forupdate and getlock accept 1s
// to 31536000s (wait_timeout's range, in whole seconds: a shorter TTL is
// not one the server can enforce); version accepts 5ms to 10 years (its
// expiry, UTC_TIMESTAMP(6) plus the TTL, must stay a DATETIME). A TTL
// outside is ErrInvalidOption before any server call.
//
// Capabilities.SessionBound is false for the same reason as on
// PostgreSQL: a broken connection is a lost lease, and the server frees a
// silent holder after wait_timeout, which the TTL sets.
//
// # Sessions
//
// forupdate pins a pool connection per lease (the row lock lives in its
// transaction), so the server's max_connections, less its other
// clients' connections, bounds the leases held at once: an Acquire beyond
// fails at once with the server's refusal (Error 1040, wrapped), which
// says so. getlock leases share connections: one session holds the
// GET_LOCK locks of many leases, a lease frees only its own (RELEASE_LOCK
// of its name, never RELEASE_ALL_LOCKS while another lease holds on the
// session), two leases of one name on one Locker never stack on one
// session (GET_LOCK is reentrant per session), and a session that breaks
// ends exactly the leases on it (Done for each). A blocking Acquire waits
// on a connection of its own (the one the Locker keeps without leases,
// with no try first; else the one its try left unused; else a new one),
// which is shared once granted, without a round trip. An attempt whose
// context ends while it waits for a connection of a full pool fails with
// dlock.ErrPoolExhausted, wrapping the context's error. wait_timeout,
// which frees a silent holder's locks within its TTL, is set at a
// session's first grant and put back when the connection returns to the
// pool; leases of different TTLs do not share a session. So a Locker
// holds as many getlock leases as it likes on a small pool, and no longer
// opens a connection per lease (TestSharedSessions: 200 on 8).
//
// # Inspect
//
// Locker.Inspect (dlock status) reports, on every strategy, whether the
// lock is held, its holder's AcquireOptions.Owner and token, and the
// sessions waiting for it (not on version, whose waiters poll). forupdate
// reads the holder's uncommitted row of <table>_grant (READ UNCOMMITTED:
// its owner, token and session; the lock is held while it is there); its
// waiters are the transactions its transaction blocks
// (information_schema.INNODB_LOCK_WAITS on MariaDB, a snapshot the server
// refreshes only when it has not been read for 0.1s;
// performance_schema.data_lock_waits on MySQL 8, unknown with
// performance_schema off). getlock asks IS_USED_LOCK for the holder's
// connection and reads the owner and token its grant wrote to the row;
// its waiters are the connections running dlock's GET_LOCK of the name
// (their statements as the process list shows them, with the arguments
// interpolated, dlock's default; MySQL 8 with performance_schema: its
// pending user-level locks). Only version knows the lease's remaining
// TTL.
//
// # Semaphores
//
// Every strategy has counting semaphores (Locker.Semaphore, up to 1000
// permits, the default depth of MySQL's recursive queries:
// Capabilities.MaxPermits). A semaphore lives in the table <table>_sem
// beside the lock table (created with it by migrate; claimed with it for
// one strategy), so the semaphore "x" and the lock "x" never meet: a
// header row (slot 0) stores the number of permits N, and slot rows 1 to
// N are the permits.
//
//   - forupdate: a permit is a slot row locked FOR UPDATE SKIP LOCKED in a
//     transaction kept open on a pinned connection, with the header row
//     locked in share mode; it is freed with the connection, as a lock is.
//     Its token is the counter's (<table>_fence), moved on with the
//     locks' after a crash.
//   - getlock: a permit is one of N GET_LOCK keys, "dlock#s" and 57 hex
//     digits of a hash of (table, name, slot), which no lock's key can be
//     (a lock name starting with "dlock#", in any case, is hashed to
//     "dlock#" and 58 hex digits). An attempt holds the header's key for
//     its duration (GET_LOCK has no shared mode: attempts of a name take
//     turns, each waiting a second at most), picks a free slot's key at
//     random and takes it with GET_LOCK(…, 0). Freed with the connection.
//   - version: a permit is a slot row leased by the server's clock (owner,
//     token, expiry), taken when free or expired under the header's row
//     lock; a crashed holder's permit comes back after its TTL.
//
// getlock's and version's tokens are the header's fence, moved on (one
// more, or the server's clock in microseconds if larger) in the grant's
// committed statement, as their locks' row fence is: they strictly
// increase across all the permits of a name, and after a restart of the
// server. The server cannot queue "any of N", nor notify: waiters poll
// (Capabilities.SemaphoreWait is poll, from 2ms to 100ms apart, or when
// version's first lease ends). None is fair.
//
// N is stored in the header. An attempt naming another N changes it only
// when no permit is held (forupdate: no session holds the header in share
// mode, tried with FOR UPDATE NOWAIT; getlock: none of the stored N keys
// is held, checked under the header's key; version: no slot's lease is in
// force, read under the header's row lock); otherwise it fails with
// ErrInvalidOption and changes nothing. Slot rows beyond the stored N are
// never taken. With migrate=false, create <table>_sem as migrate does
// (see Migrate in dialect.go) to use semaphores.
//
// # Tables
//
// One table serves one strategy: a row lock, a lease row and a GET_LOCK
// do not see each other, so two strategies on one table would both hold
// one name. The first Locker to use a table records its strategy in it
// (the row of the empty name, which is no lock name); a Locker of another
// strategy on that table fails with ErrInvalidOption. Without a table
// parameter (or with table=dlock_locks) forupdate uses dlock_locks and the
// others dlock_locks_version and dlock_locks_getlock. GET_LOCK's names are
// server-wide: getlock Lockers on two tables exclude each other but take
// tokens from two rows; give every getlock Locker of a name the same
// table.
package mysql
