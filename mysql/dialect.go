package mysql

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// dialect is MySQL's and MariaDB's SQL for the strategies of package
// sqllock. Session state travels in user variables (@dlock_*), so that a
// multi-statement script needs no procedure. Times are UTC_TIMESTAMP(6):
// the server's clock, independent of the session's time zone.
//
// forupdate's tokens come from an AUTO_INCREMENT table, whose values are
// never given out again while the server runs (a row inserted in the
// lease's transaction, which the release rolls back), on MariaDB and
// MySQL 8 alike; a restart is met by Recover. (A MariaDB SEQUENCE would save the writes,
// but NEXTVAL inside a forupdate transaction stalled concurrent acquirers
// under load.) version and getlock move the row's fence on in the grant's
// autocommitted statement (nextFence).
type dialect struct{}

func (dialect) Backend() string           { return "mysql" }
func (dialect) NativeStrategy() string    { return "getlock" }
func (dialect) Quote(ident string) string { return "`" + ident + "`" }
func (dialect) MaxIdent() int             { return 64 }
func (dialect) Placeholder(int) string    { return "?" }

// ValidateName accepts every name: the column is VARBINARY(1024).
func (dialect) ValidateName(string) error { return nil }

// Classify maps MySQL's and MariaDB's errors to the core's kinds: 1205
// (lock wait timeout, and NOWAIT on MariaDB), 3572 (NOWAIT on MySQL 8)
// and 1213 (deadlock); errors that are not server errors (I/O, context,
// invalid connection) and the "killed"/"server gone" ones break the
// connection.
func (dialect) Classify(err error) sqllock.Kind {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return sqllock.KindBroken
	}
	switch me.Number {
	case 1205, 3572:
		return sqllock.KindBusy
	case 1213:
		return sqllock.KindDeadlock
	case 1053, 1317, 1927, 2006, 2013, 4031:
		return sqllock.KindBroken
	}
	return sqllock.KindOther
}

// Migrate creates the table and the counter when information_schema
// does not list them. CREATE … IF NOT EXISTS on an existing table waits
// for the metadata locks of open transactions (every held forupdate
// lease): it runs only when something is missing, through PREPARE.
func (d dialect) Migrate(t sqllock.Table) []sqllock.Stmt {
	counter := "CREATE TABLE IF NOT EXISTS " + t.Seq + " (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY) ENGINE=InnoDB"
	live := "CREATE TABLE IF NOT EXISTS " + t.Live + " (server BIGINT UNSIGNED NOT NULL PRIMARY KEY) ENGINE=MEMORY"
	table := "CREATE TABLE IF NOT EXISTS " + t.Q + ` (
	name VARBINARY(1024) NOT NULL PRIMARY KEY,
	fence BIGINT NOT NULL DEFAULT 0,
	owner VARBINARY(1024) NOT NULL DEFAULT '',
	acquired_at DATETIME(6) NULL,
	expires_at DATETIME(6) NULL,
	session BIGINT NULL) ENGINE=InnoDB`
	schema, name := "DATABASE()", t.Raw
	if db, n, ok := strings.Cut(t.Raw, "."); ok {
		schema, name = literal(db), n
	}
	out := []sqllock.Stmt{sqllock.S("SELECT COUNT(*) INTO @dlock_m FROM information_schema.TABLES WHERE TABLE_SCHEMA = " + schema +
		" AND TABLE_NAME IN (" + literal(name) + ", " + literal(name+sqllock.SeqSuffix) + ", " + literal(name+sqllock.LiveSuffix) + ")")}
	// The counter starts at the server's clock in microseconds: a counter
	// dropped and created again goes on above every token the old one can
	// have issued (unless it issued more than one per microsecond of its
	// life, or the server's clock went back).
	start := "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)"
	for i, ddl := range []string{table, live, counter} {
		sql := literal(ddl)
		if i == 2 {
			sql = "CONCAT(" + sql + ", ' AUTO_INCREMENT=', " + start + ")"
		}
		out = append(out,
			sqllock.S("SET @dlock_ddl = IF(@dlock_m < 3, "+sql+", 'DO 0')"),
			sqllock.S("PREPARE dlock_ddl FROM @dlock_ddl"),
			sqllock.S("EXECUTE dlock_ddl"),
			sqllock.S("DEALLOCATE PREPARE dlock_ddl"))
	}
	// A counter created anew starts at the clock: clear the marker, so
	// that the first forupdate grant moves it on (Recover) above the
	// old counter's tokens, which a recovery may have moved ahead of the
	// clock.
	out = append(out, sqllock.S("DELETE FROM "+t.Live+" WHERE @dlock_m < 3"))
	// The grant table and the semaphore table, each created on its own
	// (they came later than the others: their absence says nothing of the
	// counter). A grant table created anew starts at the clock too, and
	// clears the marker: the first forupdate grant then moves both
	// counters on (Recover) above every token either can have issued.
	out = append(out,
		sqllock.S("SELECT COUNT(*) INTO @dlock_m FROM information_schema.TABLES WHERE TABLE_SCHEMA = "+schema+" AND TABLE_NAME = "+literal(name+grantSuffix)),
		sqllock.S("SET @dlock_ddl = IF(@dlock_m < 1, CONCAT("+literal(createGrant(t))+", ' AUTO_INCREMENT=', "+start+"), 'DO 0')"),
		sqllock.S("PREPARE dlock_ddl FROM @dlock_ddl"),
		sqllock.S("EXECUTE dlock_ddl"),
		sqllock.S("DEALLOCATE PREPARE dlock_ddl"),
		sqllock.S("DELETE FROM "+t.Live+" WHERE @dlock_m < 1"))
	return append(out,
		sqllock.S("SELECT COUNT(*) INTO @dlock_m FROM information_schema.TABLES WHERE TABLE_SCHEMA = "+schema+" AND TABLE_NAME = "+literal(name+sqllock.SemSuffix)),
		sqllock.S("SET @dlock_ddl = IF(@dlock_m < 1, "+literal(createSem(t))+", 'DO 0')"),
		sqllock.S("PREPARE dlock_ddl FROM @dlock_ddl"),
		sqllock.S("EXECUTE dlock_ddl"),
		sqllock.S("DEALLOCATE PREPARE dlock_ddl"))
}

// grantSuffix is appended to the lock table's name to name its grant
// table; it is no longer than sqllock.SeqSuffix.
const grantSuffix = "_grant"

// grantTable is the quoted grant table of t, next to its counter. A
// forupdate grant inserts a row into it in the lease's transaction, in
// the statement that locks the name's row (Lock): the row's
// AUTO_INCREMENT id is the grant's token (InnoDB never gives a value out
// again while the server runs, though the release rolls the row back),
// its other columns the holder, which Inspect reads dirty. Its rows are
// never committed (Recover's are deleted in the transaction that wrote
// them). (The holder table of earlier versions, <table>_hold, whose rows
// a second INSERT wrote after the token's, is no longer used.)
func grantTable(t sqllock.Table) string {
	return strings.TrimSuffix(t.Seq, sqllock.SeqSuffix+"`") + grantSuffix + "`"
}

// createGrant creates the grant table (grantTable); Migrate appends its
// AUTO_INCREMENT start.
func createGrant(t sqllock.Table) string {
	return "CREATE TABLE IF NOT EXISTS " + grantTable(t) + ` (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	name VARBINARY(1024) NOT NULL,
	owner VARBINARY(1024) NOT NULL DEFAULT '',
	session BIGINT NULL) ENGINE=InnoDB`
}

// Check refuses servers whose token counter is not durable: MySQL before
// 8.0 recomputes an InnoDB AUTO_INCREMENT counter at restart from the
// table's largest id (the counter table is kept empty: it would start
// again at 1), and so does MariaDB before 10.2.4 (MariaDB 10.3 is needed
// anyway, for NOWAIT); a counter table of another engine (created by
// hand) is refused too.
func (dialect) Check(t sqllock.Table) []sqllock.Stmt {
	schema, name := "DATABASE()", t.Raw
	if db, n, ok := strings.Cut(t.Raw, "."); ok {
		schema, name = literal(db), n
	}
	ver := "(SUBSTRING_INDEX(VERSION(), '.', 1) * 1000 + SUBSTRING_INDEX(SUBSTRING_INDEX(VERSION(), '.', 2), '.', -1))"
	return []sqllock.Stmt{sqllock.S("SELECT CASE" +
		" WHEN VERSION() LIKE '%MariaDB%' AND " + ver + " < 10003 THEN CONCAT('MariaDB ', VERSION(), ' is older than 10.3 (NOWAIT; a durable AUTO_INCREMENT counter)')" +
		" WHEN VERSION() NOT LIKE '%MariaDB%' AND " + ver + " < 8000 THEN CONCAT('MySQL ', VERSION(), ' is older than 8.0: it recomputes AUTO_INCREMENT counters at restart, so tokens would start again')" +
		" WHEN IFNULL((SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = " + schema + " AND TABLE_NAME = " + literal(name+sqllock.SeqSuffix) + "), 'InnoDB') <> 'InnoDB'" +
		" THEN 'the token counter " + strings.ReplaceAll(name, "'", "") + sqllock.SeqSuffix + " is not an InnoDB table: its AUTO_INCREMENT may not be durable'" +
		" WHEN IFNULL((SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = " + schema + " AND TABLE_NAME = " + literal(name+grantSuffix) + "), 'InnoDB') <> 'InnoDB'" +
		" THEN 'the token counter " + strings.ReplaceAll(name, "'", "") + grantSuffix + " is not an InnoDB table: its AUTO_INCREMENT may not be durable'" +
		" WHEN IFNULL((SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = " + schema + " AND TABLE_NAME = " + literal(name+sqllock.LiveSuffix) + "), 'MEMORY') <> 'MEMORY'" +
		" THEN 'the marker " + strings.ReplaceAll(name, "'", "") + sqllock.LiveSuffix + " is not a MEMORY table: a restart of the server would not empty it'" +
		" ELSE '' END")}
}

// FoldIdent keeps identifiers as they are: whether table names are case
// sensitive is the server's setting (lower_case_table_names), and nothing
// is derived from the table's name on MySQL but the claim, which lives in
// the table itself.
func (dialect) FoldIdent(ident string) string { return ident }

func (dialect) Resolve(t sqllock.Table) []sqllock.Stmt {
	schema, name := "DATABASE()", t.Raw
	if db, n, ok := strings.Cut(t.Raw, "."); ok {
		schema, name = literal(db), n
	}
	return []sqllock.Stmt{sqllock.S("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = " + schema + " AND TABLE_NAME = " + literal(name))}
}

func (dialect) Claim(t sqllock.Table, strategy string) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("INSERT IGNORE INTO "+t.Q+" (name, owner) VALUES ('', ?)", strategy),
		sqllock.S("SELECT owner FROM " + t.Q + " WHERE name = ''"),
	}
}

// literal quotes s as a string literal (s is SQL this package wrote).
func literal(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s) + "'"
}

// EnsureRow creates name's row. The existence check is a plain read, so
// a holder's lock on an existing row is not waited for; only a row created
// and locked by another client in the meantime makes the INSERT wait, as
// long as r allows (lockWait). The session's value is saved in @dlock_lw and
// restored at the end (on an error, by Abort's restore).
func (dialect) EnsureRow(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("SET @dlock_lw = IFNULL(@dlock_lw, @@SESSION.innodb_lock_wait_timeout), SESSION innodb_lock_wait_timeout = ?", lockWait(r)),
		sqllock.S("SELECT COUNT(*) INTO @dlock_e FROM "+t.Q+" WHERE name = ?", r.Name),
		sqllock.S("INSERT IGNORE INTO "+t.Q+" (name) SELECT ? FROM DUAL WHERE @dlock_e = 0", r.Name),
		restore,
	}
}

// lockKey is GET_LOCK's name: the name itself up to 64 characters, else
// (or when it looks like a hashed key, a semaphore's key or a session's
// marker: it starts with "dlock#" in any case, since some servers compare
// these names case-insensitively) "dlock#" and 58 hex digits of its
// SHA-256.
func lockKey(name string) string {
	if len([]rune(name)) <= 64 && !dlockPrefixed(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "dlock#" + hex.EncodeToString(sum[:])[:58]
}

// dlockPrefixed reports whether name starts with "dlock#" in any case
// (Unicode simple folding: "DLOCK#", "Klock#" with a Kelvin sign).
func dlockPrefixed(name string) bool {
	const prefix = "dlock#"
	n := 0
	for i := range name {
		if n == len(prefix) {
			return strings.EqualFold(name[:i], prefix)
		}
		n++
	}
	return n == len(prefix) && strings.EqualFold(name, prefix)
}

// session saves and sets the session's timeouts: wait_timeout (the idle
// limit after which the server drops a silent holder) from the TTL, and
// the row-lock wait from the context's deadline.
func session(r sqllock.Req) sqllock.Stmt {
	// Not 0 for NoWait: the token's INSERT … SELECT waits briefly for
	// InnoDB's AUTO-INC lock; NOWAIT already makes the row lock not wait.
	q := r
	q.NoWait = false
	wait := lockWait(q)
	return sqllock.S(sessionSQL, waitTimeout(r.TTL), wait)
}

// sessionSQL is session's statement. A connection of a pool the driver
// owns (conn.Run) skips it when the session already has the values it
// sets: the forupdate release there does not put the session's timeouts
// back (leaseRestore), so they are set once per connection while the
// TTL and the wait stay the same. Nothing may follow it that relies on
// it but the timeouts.
const sessionSQL = "SET @dlock_wt = IFNULL(@dlock_wt, @@SESSION.wait_timeout), @dlock_lw = IFNULL(@dlock_lw, @@SESSION.innodb_lock_wait_timeout)," +
	" SESSION wait_timeout = ?, SESSION innodb_lock_wait_timeout = ?"

// Server limits (MySQL 8 and MariaDB on Linux clamp a larger value to
// them; MySQL 8 allows innodb_lock_wait_timeout up to 1073741824, MariaDB
// up to 100000000).
const (
	maxWaitTimeout = 31536000  // wait_timeout, seconds
	maxLockWait    = 100000000 // innodb_lock_wait_timeout, seconds
	maxGetLockWait = maxWaitTimeout * time.Second
	maxVersionTTL  = 10 * 365 * 24 * time.Hour
	minPinnedTTL   = time.Second // wait_timeout counts whole seconds
	minVersionTTL  = 5 * time.Millisecond
	maxPinnedTTL   = maxWaitTimeout * time.Second
)

// TTLRange: the connection strategies set wait_timeout to the TTL in
// whole seconds (1 to 31536000), so a TTL under a second is not one the
// server can enforce; version leases expire at the server's
// UTC_TIMESTAMP(6) plus the TTL in microseconds, a DATETIME(6) that must
// stay below the year 10000 (an overflowing sum is NULL: a free lock).
func (dialect) TTLRange(s sqllock.Strategy) (lo, hi time.Duration) {
	if s == sqllock.Version {
		return minVersionTTL, maxVersionTTL
	}
	return minPinnedTTL, maxPinnedTTL
}

// waitTimeout is the session's wait_timeout for a lease of ttl: whole
// seconds rounded up, within the server's range.
func waitTimeout(ttl time.Duration) int64 { return sqllock.CeilSeconds(ttl, 1, maxWaitTimeout) }

// getLockTimeout is GET_LOCK's timeout in seconds for r: 0 for NoWait,
// else the wait less sqllock.WaitMargin, so that the server ends it
// before the context's deadline would cost the connection (a millisecond
// at least, the server's longest at most; a wait that ends early is
// started again).
func getLockTimeout(r sqllock.Req) float64 {
	switch {
	case r.NoWait:
		return 0
	case r.Wait > 0:
		return float64(sqllock.CeilMillis(sqllock.ServerWait(r, time.Millisecond), 1, int64(maxGetLockWait/time.Millisecond))) / 1000
	}
	return maxWaitTimeout
}

// lockWait is innodb_lock_wait_timeout for r: its wait in whole seconds,
// 0 for NoWait (no wait on MariaDB; MySQL 8 raises it to its minimum, 1s).
func lockWait(r sqllock.Req) int64 {
	switch {
	case r.NoWait:
		return 0
	case r.Wait > 0:
		return sqllock.CeilSeconds(r.Wait, 1, maxLockWait)
	}
	return maxLockWait
}

// restore puts the session's timeouts back.
var restore = sqllock.S(restoreSQL)

const restoreSQL = "SET SESSION wait_timeout = CAST(IFNULL(@dlock_wt, @@SESSION.wait_timeout) AS UNSIGNED)," +
	" SESSION innodb_lock_wait_timeout = CAST(IFNULL(@dlock_lw, @@SESSION.innodb_lock_wait_timeout) AS UNSIGNED), @dlock_wt = NULL, @dlock_lw = NULL"

// leaseRestore is restore at the end of a forupdate lease: a connection
// of a pool the driver owns skips it (conn.Run), keeping the lease's
// timeouts for its next lease (nothing but dlock uses that pool, and
// every dlock script that needs other values sets them); on a pool the
// user passed in it runs, so that the application's statements see the
// session's own settings. A connection left idle longer than its
// wait_timeout is closed by the server, and the pool replaces it.
var leaseRestore = sqllock.S(leaseRestoreSQL)

const leaseRestoreSQL = "/* lease */ " + restoreSQL

func (d dialect) Lock(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if s == sqllock.ForUpdate {
		// One statement locks the row, takes the token and records the
		// holder: an INSERT into the grant table (grantTable) of the row
		// it selects FOR UPDATE, while the marker names this server
		// (Recover). Its AUTO_INCREMENT id is the token (never given out
		// again while the server runs, though the release rolls the row
		// back), its other columns what Inspect reads dirty. A waiter
		// woken by the holder's release has nothing left to run but the
		// rest of that statement: each statement after the wake cost a
		// handoff 60-160 µs (a waiter's lock, token and holder in three
		// statements: 384 µs from the holder's ROLLBACK to the waiter's
		// reply; in this one: 223 µs; the bare SELECT … FOR UPDATE: 221 µs,
		// probed alternately on one server). InnoDB takes the counter's
		// AUTO-INC lock at the row's insert, after the row lock's wait, so
		// a waiter holds up no other name's grant. The row the waiters
		// queue on is locked, never written: a holder's write of it cost
		// every grant its undo and a handoff the waiters' re-read of a
		// changed row. The release rolls it all back: nothing is
		// committed, nothing flushed. The answer comes from the OK
		// packets (runOK): the INSERT's id is the token; when it inserted
		// nothing (the name has no row, or the marker is missing), the
		// script's last statement, run on its own, tells which: it finds
		// the row (a token of 0: Recover) or not (create it).
		var create []sqllock.Stmt
		if r.Create {
			// A name this Locker has not seen: its row is created first
			// if missing, autocommitted, as EnsureRow does (without its
			// restore: session sets the timeouts next).
			create = d.EnsureRow(t, r)[:3]
		}
		out := append(create, session(r), sqllock.S("START TRANSACTION"))
		// The server evaluates the marker's EXISTS after the row lock's
		// wake: 25-40 µs of each handoff (the holder's ROLLBACK to the
		// waiter's reply, probed alternately on one server). A derived
		// table of the marker, read before the wait, saves that but costs
		// every acquire its temporary table (the uncontended acquire's
		// p50 351 → 414 µs, dlockbench -quick, 4 alternated pairs); a
		// check in a statement before this one would let the marker be
		// cleared during the wait (TestForUpdateMarkerClearedWhileWaiting).
		marker := "EXISTS (SELECT 1 FROM " + t.Live + " WHERE server = @@server_id)"
		if r.NoWait {
			// NOWAIT is the statement's: in the INSERT, it would refuse
			// the counter's AUTO-INC lock too while another grant's
			// INSERT holds it (Error 1467), so TryAcquire, which no
			// release wakes, locks the row in a statement of its own.
			return append(out,
				sqllock.S(foundTag+"SELECT fence INTO @dlock_f FROM "+t.Q+" WHERE name = ? FOR UPDATE NOWAIT", r.Name),
				sqllock.S(lockTag+"INSERT INTO "+grantTable(t)+" (id, name, owner, session) SELECT NULL, ?, ?, CONNECTION_ID() FROM DUAL WHERE ROW_COUNT() = 1 AND "+marker,
					r.Name, r.Owner))
		}
		return append(out,
			sqllock.S(lockTag+"INSERT INTO "+grantTable(t)+" (id, name, owner, session) SELECT NULL, name, ?, CONNECTION_ID() FROM "+t.Q+
				" WHERE name = ? AND "+marker+" FOR UPDATE", r.Owner, r.Name),
			sqllock.S(elseTag+"SELECT fence INTO @dlock_f FROM "+t.Q+" WHERE name = ? FOR UPDATE", r.Name))
	}
	// getlock: the token is the name's row's fence, moved on by the
	// holder's own autocommitted write (committed, as durably as any
	// commit, before the reply), so no counter, transaction or saved
	// setting is needed. GET_LOCK is the condition of that write (an
	// INSERT … SELECT … FROM DUAL WHERE GET_LOCK(…) = 1, evaluated once):
	// a waiter woken by the release has nothing left to run but the rest
	// of its statement (each statement after the wake cost a handoff
	// ~100 µs: 389 µs from the holder's RELEASE_LOCK to the waiter's
	// reply with GET_LOCK, the session's idle limit and the write in three
	// statements, 191 µs in one, probed alternately on one server). Only
	// the holder of GET_LOCK writes the row, so the write never waits; a
	// name without a row yet gets one (the INSERT). The session's
	// wait_timeout is saved once per connection (@dlock_wt) and changed
	// only on a grant (by SharedLock's setup, after the write: a session's
	// first grant only), so a refused attempt leaves nothing to undo.
	// While it waits, the statement holds the lock table's metadata lock
	// (as a held forupdate lease does its table's): DDL on the table waits
	// for the waiters. GET_LOCK in a write makes it unsafe for
	// statement-based binary logging: with binlog_format=STATEMENT the
	// server warns at each grant (MIXED, MariaDB's default, and ROW,
	// MySQL's, log the row).
	return d.SharedLock(t, r, true)
}

var _ sqllock.Sharer = dialect{}

var _ sqllock.RowCreator = dialect{}

// CreatesRow: forupdate's Lock and VersionAcquire create a new name's row
// (Req.Create).
func (dialect) CreatesRow() {}

// Dedicated: GET_LOCK's leases always share sessions (Inspect reads the
// holder from the row its grant writes, which names the lock).
func (dialect) Dedicated(sqllock.Req) bool { return false }

// SharedLock is getlock's Lock (see Lock); the session's wait_timeout is
// changed (on a grant) only with setup, once per session.
func (dialect) SharedLock(t sqllock.Table, r sqllock.Req, setup bool) []sqllock.Stmt {
	// The write answers in its OK packet (lastIDTag): the token, the
	// statement's last LAST_INSERT_ID(expr) (the update's, when the row
	// exists; a new row's, else); no row when GET_LOCK refused and nothing
	// was written.
	out := []sqllock.Stmt{sqllock.S(lastIDTag+"INSERT INTO "+t.Q+" (name, fence, owner, acquired_at, session)"+
		" SELECT ?, LAST_INSERT_ID("+clockMicros+"), ?, UTC_TIMESTAMP(6), CONNECTION_ID() FROM DUAL WHERE GET_LOCK(?, ?) = 1"+
		" ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID("+nextFence+"), owner = ?, acquired_at = UTC_TIMESTAMP(6), session = CONNECTION_ID()",
		r.Name, r.Owner, lockKey(r.Name), getLockTimeout(r), r.Owner)}
	if setup {
		// ROW_COUNT() is the write's: 0 when GET_LOCK refused.
		out = append(out, sqllock.S("SET @dlock_wt = IFNULL(@dlock_wt, @@SESSION.wait_timeout), SESSION wait_timeout = IF(ROW_COUNT() > 0, ?, @@SESSION.wait_timeout)", waitTimeout(r.TTL)))
	}
	return out
}

// SharedUnlock frees r's GET_LOCK alone.
func (dialect) SharedUnlock(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S("SELECT IFNULL(RELEASE_LOCK(?) = 1, FALSE)", nativeKey(t, r))}
}

// Reset puts back the wait_timeout that SharedLock's setup changed.
func (dialect) Reset(sqllock.Table) []sqllock.Stmt { return []sqllock.Stmt{restoreWait} }

var _ sqllock.FencingNoter = dialect{}

// FencingNote: getlock's token is its row's, not the counter's;
// forupdate's is its grant row's id, not made durable per grant.
func (dialect) FencingNote(s sqllock.Strategy, t sqllock.Table) string {
	if s == sqllock.ForUpdate {
		return "the id of the grant's row in " + t.Raw + grantSuffix + " (an AUTO_INCREMENT counter that is never given out again), inserted by the statement that locks the name's row; after every restart of the server or failover (a MEMORY marker, " + t.Raw + sqllock.LiveSuffix + ", found without this server's id) the counter is moved on by 2^36 in a commit of its own before the next token"
	}
	if s != sqllock.Native {
		return ""
	}
	return "the name's row's fence, moved on (to the last token plus one, or the server's clock in microseconds if larger) by the autocommitted write whose condition is GET_LOCK, in the statement that takes the lock"
}

// clockMicros is the server's clock in microseconds since the epoch (UTC,
// whatever the session's time zone).
const clockMicros = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// nextFence is the next token of a row whose fence column holds the last:
// one more, or the server's clock in microseconds when that is larger.
// Tokens of a row strictly increase whatever the clock does; a row (or a
// table) dropped and created again goes on above the old one's tokens,
// which were at most one per microsecond ahead of the clock, unless the
// clock went back. The version and getlock tokens are written by the
// grant's own autocommitted statement: a token is returned only once its
// commit is done, so a crash of the server cannot hand it out again.
const nextFence = "GREATEST(fence + 1, " + clockMicros + ")"

// counterJump is how far Recover moves the counter on: far more values
// than the server can have given out without their advance reaching the
// redo log on disk (InnoDB writes its log buffer at every commit and at
// least once a second), or than a replica promoted after a failover can
// lag behind (2^36 values: 19 hours of a million grants a second).
const counterJump = 1 << 36

// Recover moves both counters on (the grant table's, which numbers the
// locks' grants, and <table>_fence, the semaphores') to counterJump past
// the larger of them, in a transaction of its own (their advance is
// committed with it, as durably as innodb_flush_log_at_trx_commit makes
// every commit), and only then records this server (@@server_id) in the
// marker, a MEMORY table, which every restart of the server empties (a
// crash or not) and whose rows name the server that wrote them (a replica
// promoted after a failover has its own server_id, and a copy of its old
// primary's row at most). Past the larger: a grant table created next to
// an older counter (Migrate clears the marker then) starts above every
// token that counter gave out. Two recoveries at once move the counters
// on twice: harmless.
func (dialect) Recover(t sqllock.Table) []sqllock.Stmt {
	g := grantTable(t)
	return []sqllock.Stmt{
		sqllock.S("SELECT COUNT(*) INTO @dlock_lv FROM " + t.Live + " WHERE server = @@server_id"),
		sqllock.S("START TRANSACTION"),
		sqllock.S("INSERT INTO " + t.Seq + " (id) SELECT NULL FROM DUAL WHERE @dlock_lv = 0"),
		sqllock.S("SET @dlock_v = IF(ROW_COUNT() = 1, LAST_INSERT_ID(), NULL)"),
		sqllock.S("INSERT INTO " + g + " (id, name) SELECT NULL, '' FROM DUAL WHERE @dlock_lv = 0"),
		sqllock.S("SET @dlock_gv = IF(ROW_COUNT() = 1, LAST_INSERT_ID(), NULL)"),
		sqllock.S("SET @dlock_j = GREATEST(@dlock_v, @dlock_gv) + " + strconv.FormatInt(counterJump, 10)), // NULL when either is
		sqllock.S("INSERT INTO " + t.Seq + " (id) SELECT @dlock_j FROM DUAL WHERE @dlock_j IS NOT NULL"),
		sqllock.S("INSERT INTO " + g + " (id, name) SELECT @dlock_j, '' FROM DUAL WHERE @dlock_j IS NOT NULL"),
		sqllock.S("DELETE FROM " + t.Seq + " WHERE id IN (@dlock_v, @dlock_j)"),
		sqllock.S("DELETE FROM " + g + " WHERE id IN (@dlock_gv, @dlock_j)"),
		sqllock.S("COMMIT"),
		// A user variable, not @@server_id, in the INSERT: a replica
		// replaying the statement stores the primary's id, not its own.
		sqllock.S("SET @dlock_sid = @@server_id"),
		sqllock.S("INSERT IGNORE INTO " + t.Live + " (server) SELECT @dlock_sid FROM DUAL WHERE @dlock_lv = 0"),
		sqllock.S("SELECT @dlock_lv"),
	}
}

func (dialect) Abort(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if s == sqllock.ForUpdate {
		return []sqllock.Stmt{sqllock.S("ROLLBACK"), restore}
	}
	if r.Permits > 0 {
		return semAbort(t, r)
	}
	if r.Missed {
		return nil // GET_LOCK refused: nothing was changed
	}
	return []sqllock.Stmt{sqllock.S("DO RELEASE_LOCK(?)", lockKey(r.Name)), restoreWait}
}

// restoreWait puts back the wait_timeout that a getlock grant changed
// (saved in @dlock_wt, kept for the connection's next grant).
var restoreWait = sqllock.S("SET SESSION wait_timeout = CAST(IFNULL(@dlock_wt, @@SESSION.wait_timeout) AS UNSIGNED)")

func (dialect) Ping(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if s == sqllock.ForUpdate {
		return []sqllock.Stmt{sqllock.S("SELECT TRUE")}
	}
	return []sqllock.Stmt{sqllock.S("SELECT IFNULL(IS_USED_LOCK(?) = CONNECTION_ID(), FALSE)", nativeKey(t, r))}
}

func (dialect) Unlock(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if s == sqllock.ForUpdate {
		// Nothing to keep: a rollback is not flushed. Executed, not
		// queried: it answers nothing.
		return []sqllock.Stmt{sqllock.S(execTag + "ROLLBACK"), leaseRestore}
	}
	return []sqllock.Stmt{restoreWait, sqllock.S("SELECT IFNULL(RELEASE_LOCK(?) = 1, FALSE)", nativeKey(t, r))}
}

// nativeKey is the GET_LOCK key a getlock lease holds: its lock's, or its
// semaphore slot's.
func nativeKey(t sqllock.Table, r sqllock.Req) string {
	if r.Permits > 0 {
		return semKey(semBase(t, r.Name), r.Slot)
	}
	return lockKey(r.Name)
}

// VersionAcquire takes the lease in one autocommitted statement, which
// also creates name's row the first time (a fresh name costs no more than
// a known one): the INSERT's values grant a new row, its token the
// server's clock in microseconds; on an existing row each column is
// assigned only when the lease is free or expired (expires_at, assigned
// last, is still the old one while the others are), and the fence moves
// on (nextFence). The token travels in the OK packet (grantTag): the
// statement's last LAST_INSERT_ID(expr), set to 0 when the row was held.
// Not granted, it changes nothing; the holder's remaining lease is not
// read (the caller's backoff is shorter than a lease anyway).
//
// Without r.Create (a name whose row the Locker has found before) it is
// an UPDATE of the row when free, which costs the server less than the
// INSERT that fails into its update (by 20 µs a grant, measured
// interleaved on one connection). The OK packet tells a grant (a row
// changed, its token the insert id), a held row (no row changed: its
// WHERE's second term, always false, set the insert id to the holder's
// token, which is never 0) and no row (the insert id 0) apart (takeTag).
// A server that skipped that term would make a held row read as a
// missing one: the caller then tries again with Create, which refuses.
func (d dialect) VersionAcquire(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	const free = "(expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6))"
	expires := "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND"
	ttl := sqllock.Micros(r.TTL)
	if !r.Create {
		return []sqllock.Stmt{
			sqllock.S(takeTag+"UPDATE "+t.Q+" SET fence = LAST_INSERT_ID("+nextFence+"), owner = ?, acquired_at = UTC_TIMESTAMP(6), session = ?, expires_at = "+expires+
				" WHERE name = ? AND ("+free+" OR LAST_INSERT_ID(fence) < 0)",
				r.Owner, r.Nonce, ttl, r.Name),
		}
	}
	return []sqllock.Stmt{
		sqllock.S(grantTag+"INSERT INTO "+t.Q+" (name, fence, owner, acquired_at, expires_at, session)"+
			" VALUES (?, LAST_INSERT_ID("+clockMicros+"), ?, UTC_TIMESTAMP(6), "+expires+", ?) ON DUPLICATE KEY UPDATE"+
			" fence = IF("+free+", LAST_INSERT_ID("+nextFence+"), fence + LAST_INSERT_ID(0)),"+
			" owner = IF("+free+", ?, owner),"+
			" acquired_at = IF("+free+", UTC_TIMESTAMP(6), acquired_at),"+
			" session = IF("+free+", ?, session),"+
			" expires_at = IF("+free+", "+expires+", expires_at)",
			r.Name, r.Owner, ttl, r.Nonce, r.Owner, r.Nonce, ttl),
	}
}

// VersionRefresh moves the expiry on in one statement; the rows it
// changed say whether the lease was still held (changedTag).
func (dialect) VersionRefresh(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S(changedTag+"UPDATE "+t.Q+" SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE name = ? AND fence = ? AND expires_at > UTC_TIMESTAMP(6)",
			sqllock.Micros(r.TTL), r.Name, r.Token),
	}
}

// VersionRefreshBatch is VersionRefresh for many leases in one
// statement: the rows it changed are its answer (countTag). The name IN
// list lets the primary key find the rows; (name, fence) picks the leases.
func (dialect) VersionRefreshBatch(t sqllock.Table, ttl time.Duration, rs []sqllock.Req) []sqllock.Stmt {
	var b strings.Builder
	b.WriteString(countTag + "UPDATE " + t.Q + " SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE name IN (")
	args := make([]any, 0, 1+3*len(rs))
	args = append(args, sqllock.Micros(ttl))
	for i, r := range rs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("?")
		args = append(args, r.Name)
	}
	b.WriteString(") AND (name, fence) IN (")
	for i, r := range rs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("(?,?)")
		args = append(args, r.Name, r.Token)
	}
	b.WriteString(") AND expires_at > UTC_TIMESTAMP(6)")
	return []sqllock.Stmt{sqllock.S(b.String(), args...)}
}

// VersionRelease frees the lease in one statement, as VersionRefresh.
func (dialect) VersionRelease(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S(changedTag+"UPDATE "+t.Q+" SET expires_at = NULL WHERE name = ? AND fence = ? AND expires_at > UTC_TIMESTAMP(6)", r.Name, r.Token),
	}
}

func (dialect) VersionAbort(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("UPDATE "+t.Q+" SET expires_at = NULL WHERE name = ? AND session = ? AND expires_at > UTC_TIMESTAMP(6)", r.Name, r.Nonce),
		sqllock.S("SELECT ROW_COUNT()"),
	}
}
