package mysql

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// Semaphores (sqllock.SemDialect): a header row (slot 0) storing N and N
// slot rows in the table's semaphore table (Table.Sem). forupdate's token
// is the counter's, as its locks' are; version's and getlock's is the
// header's fence, moved on (nextFence) in the grant's committed
// statement, as their locks' row fence is.
var _ sqllock.SemDialect = dialect{}

// SemMaxPermits: every strategy has semaphores, up to the depth of the
// recursive queries that count slots (MySQL's cte_max_recursion_depth is
// 1000 by default).
func (dialect) SemMaxPermits(sqllock.Strategy) int { return sqllock.MaxPermits }

// createSem is the semaphore table.
func createSem(t sqllock.Table) string {
	return "CREATE TABLE IF NOT EXISTS " + t.Sem + ` (
	name VARBINARY(1024) NOT NULL,
	slot INT NOT NULL,
	permits INT NOT NULL DEFAULT 0,
	fence BIGINT NOT NULL DEFAULT 0,
	owner VARBINARY(1024) NOT NULL DEFAULT '',
	acquired_at DATETIME(6) NULL,
	expires_at DATETIME(6) NULL,
	session BIGINT NULL,
	PRIMARY KEY (name, slot)) ENGINE=InnoDB`
}

// numbers is a derived table of the integers 1 to bound (an SQL
// expression of at least 1 and at most sqllock.MaxPermits), column s.
func numbers(bound string) string {
	return "(WITH RECURSIVE n (s) AS (SELECT 1 UNION ALL SELECT s + 1 FROM n WHERE s < " + bound + ") SELECT s FROM n) AS dlock_n"
}

// semBase is what a semaphore's GET_LOCK keys are derived from: the
// table (as the server resolves it) and the name, hashed.
func semBase(t sqllock.Table, name string) string {
	h := sha256.New()
	h.Write([]byte(t.Key()))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return hex.EncodeToString(h.Sum(nil))
}

// semKey is GET_LOCK's name of slot (0: the header) of the semaphore of
// semBase base: "dlock#s" and 57 hex digits of SHA-256 over base, ':'
// and slot. No lock's key (lockKey) is of that form: a lock's key is its
// name when that does not start with "dlock#", else "dlock#" and 58 hex
// digits; 's' is no hex digit. semKeySQL computes the same in SQL.
func semKey(base string, slot int) string {
	sum := sha256.Sum256([]byte(base + ":" + strconv.Itoa(slot)))
	return "dlock#s" + hex.EncodeToString(sum[:])[:57]
}

// semKeySQL is semKey as an SQL expression of base and slot expressions.
func semKeySQL(base, slot string) string {
	return "CONCAT('dlock#s', LEFT(SHA2(CONCAT(" + base + ", ':', " + slot + "), 256), 57))"
}

// SemLock: forupdate locks the header LOCK IN SHARE MODE (waiting a
// second at most for a SemResize, whose FOR UPDATE NOWAIT fails while any
// permit is held) and a slot row FOR UPDATE SKIP LOCKED, and takes the
// token as Lock does. getlock holds the header's key for the attempt
// (GET_LOCK has no shared mode: attempts and SemResize take turns under
// it, for a second at most), picks a free slot's key at random among
// the stored N and takes it with GET_LOCK(…, 0), then moves the header's
// fence on.
func (dialect) SemLock(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if s == sqllock.ForUpdate {
		return []sqllock.Stmt{
			sqllock.S(sessionSQL, waitTimeout(r.TTL), int64(1)),
			sqllock.S("SET @dlock_s = NULL, @dlock_p = NULL"),
			sqllock.S("START TRANSACTION"),
			sqllock.S("SELECT permits INTO @dlock_p FROM "+t.Sem+" WHERE name = ? AND slot = 0 LOCK IN SHARE MODE", r.Name),
			sqllock.S("SELECT slot INTO @dlock_s FROM "+t.Sem+" WHERE name = ? AND slot BETWEEN 1 AND ? AND @dlock_p = ? ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED", r.Name, r.Permits, r.Permits),
			sqllock.S("INSERT INTO " + t.Seq + " (id) SELECT NULL FROM DUAL WHERE @dlock_s IS NOT NULL AND EXISTS (SELECT 1 FROM " + t.Live + " WHERE server = @@server_id)"),
			sqllock.S("SET @dlock_t = IF(@dlock_s IS NULL, NULL, IF(ROW_COUNT() = 1, LAST_INSERT_ID(), 0))"),
			sqllock.S("UPDATE "+t.Sem+" SET fence = @dlock_t, owner = ?, acquired_at = UTC_TIMESTAMP(6), session = CONNECTION_ID() WHERE name = ? AND slot = @dlock_s AND @dlock_t > 0", r.Owner, r.Name),
			sqllock.S("SELECT @dlock_t, @dlock_p, @dlock_s"),
		}
	}
	base := semBase(t, r.Name)
	return []sqllock.Stmt{
		sqllock.S("SET @dlock_s = NULL, @dlock_p = NULL, @dlock_g = 0, @dlock_b = ?", base),
		sqllock.S("SET @dlock_h = GET_LOCK(" + semKeySQL("@dlock_b", "0") + ", 1)"),
		sqllock.S("SELECT permits INTO @dlock_p FROM "+t.Sem+" WHERE name = ? AND slot = 0 AND @dlock_h = 1", r.Name),
		sqllock.S("SELECT s INTO @dlock_s FROM "+numbers("?")+" WHERE @dlock_h = 1 AND @dlock_p = ? AND IS_FREE_LOCK("+semKeySQL("@dlock_b", "s")+") ORDER BY RAND() LIMIT 1", r.Permits, r.Permits),
		sqllock.S("SET @dlock_g = IF(@dlock_s IS NULL, 0, GET_LOCK(" + semKeySQL("@dlock_b", "@dlock_s") + ", 0))"),
		sqllock.S("DO IF(@dlock_h = 1, RELEASE_LOCK(" + semKeySQL("@dlock_b", "0") + "), 0)"),
		sqllock.S("SET @dlock_wt = IFNULL(@dlock_wt, @@SESSION.wait_timeout), SESSION wait_timeout = IF(@dlock_g = 1, ?, @@SESSION.wait_timeout)", waitTimeout(r.TTL)),
		sqllock.S("UPDATE "+t.Sem+" SET fence = LAST_INSERT_ID("+nextFence+"), owner = ?, acquired_at = UTC_TIMESTAMP(6), session = CONNECTION_ID() WHERE name = ? AND slot = 0 AND @dlock_g = 1", r.Owner, r.Name),
		// A header busy for longer than a second reads as full.
		sqllock.S("SELECT IF(@dlock_g = 1, LAST_INSERT_ID(), NULL), IF(@dlock_h = 1, @dlock_p, ?), IF(@dlock_g = 1, @dlock_s, NULL)", r.Permits),
	}
}

// semAbort undoes a getlock SemLock that failed midway (one that ran to
// the end without a grant holds nothing); forupdate's is Abort's.
func semAbort(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if r.Missed {
		return nil
	}
	return []sqllock.Stmt{
		sqllock.S("DO RELEASE_LOCK(" + semKeySQL("@dlock_b", "0") + "), IF(@dlock_s IS NULL, 0, RELEASE_LOCK(" + semKeySQL("@dlock_b", "@dlock_s") + "))"),
		restoreWait,
	}
}

// SemResize: forupdate takes the header FOR UPDATE NOWAIT (a holder's
// shared lock makes it fail: busy); getlock counts the keys of the
// stored N's slots that are held, under the header's key; version locks
// the header and counts the slots whose lease is in force. N changes only
// when none is held.
func (dialect) SemResize(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if s == sqllock.Native {
		base := semBase(t, r.Name)
		return []sqllock.Stmt{
			sqllock.S("SET @dlock_p = NULL, @dlock_u = NULL, @dlock_b = ?", base),
			sqllock.S("SET @dlock_h = GET_LOCK(" + semKeySQL("@dlock_b", "0") + ", 1)"),
			sqllock.S("SELECT permits INTO @dlock_p FROM "+t.Sem+" WHERE name = ? AND slot = 0", r.Name),
			sqllock.S("SELECT COUNT(*) INTO @dlock_u FROM " + numbers("GREATEST(IFNULL(@dlock_p, 0), 1)") + " WHERE s <= IFNULL(@dlock_p, 0) AND NOT IS_FREE_LOCK(" + semKeySQL("@dlock_b", "s") + ")"),
			sqllock.S("INSERT INTO "+t.Sem+" (name, slot, permits) SELECT ?, 0, ? FROM DUAL WHERE @dlock_h = 1 AND @dlock_u = 0 ON DUPLICATE KEY UPDATE permits = VALUES(permits)", r.Name, r.Permits),
			sqllock.S("DO IF(@dlock_h = 1, RELEASE_LOCK(" + semKeySQL("@dlock_b", "0") + "), 0)"),
		}
	}
	lock, count := " FOR UPDATE NOWAIT", sqllock.S("SET @dlock_u = 0")
	if s == sqllock.Version {
		lock = " FOR UPDATE"
		count = sqllock.S("SELECT COUNT(*) INTO @dlock_u FROM "+t.Sem+" WHERE name = ? AND slot > 0 AND expires_at > UTC_TIMESTAMP(6) LOCK IN SHARE MODE", r.Name)
	}
	return []sqllock.Stmt{
		sqllock.S("START TRANSACTION"),
		sqllock.S("INSERT IGNORE INTO "+t.Sem+" (name, slot, permits) VALUES (?, 0, ?)", r.Name, r.Permits),
		sqllock.S("SELECT permits INTO @dlock_p FROM "+t.Sem+" WHERE name = ? AND slot = 0"+lock, r.Name),
		count,
		sqllock.S("UPDATE "+t.Sem+" SET permits = ? WHERE name = ? AND slot = 0 AND @dlock_u = 0", r.Permits, r.Name),
		sqllock.S("INSERT IGNORE INTO "+t.Sem+" (name, slot) SELECT ?, s FROM "+numbers("?")+" WHERE @dlock_u = 0", r.Name, r.Permits),
		sqllock.S("COMMIT"),
	}
}

// SemVersionAcquire takes a free or expired slot under the header's
// FOR UPDATE (the name's grants take turns there), moving the header's
// fence on for the token, all in one committed transaction.
func (dialect) SemVersionAcquire(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("SET @dlock_s = NULL, @dlock_p = NULL, @dlock_t = NULL, @dlock_r = NULL"),
		sqllock.S("START TRANSACTION"),
		sqllock.S("SELECT permits INTO @dlock_p FROM "+t.Sem+" WHERE name = ? AND slot = 0 FOR UPDATE", r.Name),
		sqllock.S("SELECT slot INTO @dlock_s FROM "+t.Sem+" WHERE name = ? AND slot BETWEEN 1 AND ? AND @dlock_p = ? AND (expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6)) ORDER BY slot LIMIT 1 FOR UPDATE",
			r.Name, r.Permits, r.Permits),
		sqllock.S("UPDATE "+t.Sem+" SET fence = LAST_INSERT_ID("+nextFence+") WHERE name = ? AND slot = 0 AND @dlock_s IS NOT NULL", r.Name),
		sqllock.S("SET @dlock_t = IF(@dlock_s IS NULL OR ROW_COUNT() <> 1, NULL, LAST_INSERT_ID())"),
		sqllock.S("UPDATE "+t.Sem+" SET fence = @dlock_t, owner = ?, acquired_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, session = ? WHERE name = ? AND slot = @dlock_s AND @dlock_t IS NOT NULL",
			r.Owner, sqllock.Micros(r.TTL), r.Nonce, r.Name),
		sqllock.S("SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(expires_at)) INTO @dlock_r FROM "+t.Sem+" WHERE name = ? AND slot BETWEEN 1 AND ? AND expires_at > UTC_TIMESTAMP(6) AND @dlock_t IS NULL",
			r.Name, r.Permits),
		sqllock.S("COMMIT"),
		sqllock.S("SELECT @dlock_t, @dlock_p, @dlock_r"),
	}
}

func (dialect) SemVersionRefresh(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("UPDATE "+t.Sem+" SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE name = ? AND slot > 0 AND fence = ? AND expires_at > UTC_TIMESTAMP(6)",
			sqllock.Micros(r.TTL), r.Name, r.Token),
		sqllock.S("SELECT TRUE FROM DUAL WHERE ROW_COUNT() = 1"),
	}
}

func (dialect) SemVersionRelease(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("UPDATE "+t.Sem+" SET expires_at = NULL WHERE name = ? AND slot > 0 AND fence = ? AND expires_at > UTC_TIMESTAMP(6)", r.Name, r.Token),
		sqllock.S("SELECT TRUE FROM DUAL WHERE ROW_COUNT() = 1"),
	}
}

func (dialect) SemVersionAbort(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("UPDATE "+t.Sem+" SET expires_at = NULL WHERE name = ? AND slot > 0 AND session = ? AND expires_at > UTC_TIMESTAMP(6)", r.Name, r.Nonce),
		sqllock.S("SELECT ROW_COUNT()"),
	}
}
