package postgres

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// Semaphores (sqllock.SemDialect): a header row (slot 0) storing N and N
// slot rows in the table's semaphore table (Table.Sem). Every strategy's
// token is the lock table's sequence value, as its locks' are.
var _ sqllock.SemDialect = dialect{}

// SemMaxPermits: every strategy has semaphores.
func (dialect) SemMaxPermits(sqllock.Strategy) int { return sqllock.MaxPermits }

// createSem is the semaphore table.
func createSem(t sqllock.Table) string {
	return "CREATE TABLE IF NOT EXISTS " + t.Sem + ` (
	name text NOT NULL,
	slot integer NOT NULL,
	permits integer NOT NULL DEFAULT 0,
	fence bigint NOT NULL DEFAULT 0,
	owner text NOT NULL DEFAULT '',
	acquired_at timestamptz,
	expires_at timestamptz,
	session bigint,
	PRIMARY KEY (name, slot))`
}

// semBase is what a semaphore's advisory keys are derived from: the
// table (as the server resolves it) and the name, hashed, so that the SQL
// that derives a slot's key needs no bytes of the name.
func semBase(t sqllock.Table, name string) string {
	h := sha256.New()
	h.Write([]byte(t.Key()))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return hex.EncodeToString(h.Sum(nil))
}

// semKey is the advisory key of slot (an SQL expression; 0 is the
// header) of the semaphore whose semBase is the text placeholder base:
// the two int4 halves of a 64-bit hash of both. A semaphore's keys are
// taken with the two-argument functions, whose keys are a space apart
// from the one-argument bigint keys of the locks (pg_locks tells them by
// objsubid): a semaphore's key can never be a lock's. Two (semaphore,
// slot) pairs share a key with probability 2^-64, as two locks do.
// hashtextextended is the hash of hash partitioning, which the server
// keeps stable across versions.
func semKey(base, slot string) string {
	h := "hashtextextended(" + base + " || ':' || (" + slot + ")::text, 0)"
	return "(" + h + " >> 32)::int4, " + h + "::bit(32)::int4"
}

// SemLock: forupdate locks the header FOR SHARE (a SemResize's FOR UPDATE
// NOWAIT then fails while any permit is held) and a slot row FOR UPDATE
// SKIP LOCKED, and takes the token as Lock does; advisory holds the
// header's key shared for as long as the permit (first statement: the
// next one reads the header with a snapshot taken after it) and tries the
// slots' keys in turn.
func (dialect) SemLock(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	ttl := strconv.FormatInt(timeoutMS(r.TTL), 10)
	if s == sqllock.ForUpdate {
		return []sqllock.Stmt{
			sqllock.S("BEGIN"),
			sqllock.S("SELECT set_config('idle_in_transaction_session_timeout', $1, true)", ttl),
			sqllock.S(`WITH h AS (SELECT permits FROM `+t.Sem+` WHERE name = $1 AND slot = 0 FOR SHARE NOWAIT),
s AS (SELECT slot FROM `+t.Sem+` WHERE name = $1 AND slot BETWEEN 1 AND $2 AND (SELECT permits FROM h) = $2 ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED),
g AS (SELECT CASE WHEN EXISTS (SELECT 1 FROM `+t.Live+`) THEN `+nextval(t)+` ELSE 0 END AS f, slot FROM s)
SELECT (SELECT f FROM g), (SELECT permits FROM h), (SELECT slot FROM g)`, r.Name, r.Permits),
		}
	}
	// advisory: the settings are saved and changed only on a grant, as
	// Lock's are. A header key held by a SemResize makes the stored N
	// read as r.Permits: busy, try again.
	base := semBase(t, r.Name)
	return []sqllock.Stmt{
		sqllock.S("SELECT set_config('dlock.h', pg_try_advisory_lock_shared("+semKey("$1::text", "0")+")::text, false)", base),
		sqllock.S(`WITH h AS (SELECT CASE WHEN current_setting('dlock.h') = 'true' THEN (SELECT permits FROM `+t.Sem+` WHERE name = $1 AND slot = 0) ELSE $3 END AS p),
s AS (SELECT n FROM generate_series(1, $3::int) n WHERE current_setting('dlock.h') = 'true' AND (SELECT p FROM h) = $3 AND pg_try_advisory_lock(`+semKey("$2::text", "n")+`) LIMIT 1),
g AS (SELECT `+nextval(t)+` AS f, n FROM s WHERE set_config('idle_session_timeout', CASE WHEN `+save("dlock.idle", "idle_session_timeout")+` THEN $4::text END, false) IS NOT NULL)
SELECT (SELECT f FROM g), (SELECT p FROM h), (SELECT n FROM g)`, r.Name, base, r.Permits, ttl),
	}
}

// semAbort undoes a SemLock (the connection is pinned for this permit
// alone: every advisory lock of its session is the attempt's). A SemLock
// that granted nothing (r.Missed) changed no setting.
func semAbort(s sqllock.Strategy, r sqllock.Req) []sqllock.Stmt {
	if s == sqllock.ForUpdate {
		return []sqllock.Stmt{sqllock.S("ROLLBACK")}
	}
	if r.Missed { // no column: Run scans no destination
		return []sqllock.Stmt{sqllock.S("SELECT FROM pg_advisory_unlock_all()")}
	}
	return []sqllock.Stmt{sqllock.S("SELECT pg_advisory_unlock_all()"), sqllock.S("RESET idle_session_timeout")}
}

// semUnlock releases a permit and then notifies the semaphore's waiters
// (after the rollback: a NOTIFY in the rolled back transaction would not
// be sent). advisory unlocks the slot's key (its result says whether it
// was held), then every other lock of the session (the header's shared
// key), and puts back the session's idle timeout the grant saved.
func semUnlock(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	wake := sqllock.S("SELECT true FROM pg_notify($1, $2)", r.Channel, sqllock.SemWakeKey(r.Name))
	if s == sqllock.ForUpdate {
		return []sqllock.Stmt{sqllock.S("ROLLBACK"), wake}
	}
	return []sqllock.Stmt{
		sqllock.S("SELECT set_config('dlock.u', pg_advisory_unlock("+semKey("$1::text", "$2::int")+")::text, false)", semBase(t, r.Name), r.Slot),
		sqllock.S("SELECT pg_advisory_unlock_all(), set_config('idle_session_timeout', current_setting('dlock.idle'), false), pg_notify($1, $2)", r.Channel, sqllock.SemWakeKey(r.Name)),
		sqllock.S("SELECT current_setting('dlock.u') = 'true'"),
	}
}

// SemResize: forupdate takes the header FOR UPDATE NOWAIT (a holder's FOR
// SHARE makes it fail: busy); advisory takes the header's key exclusive
// for the statement's transaction (a holder's shared key makes it
// return false, changing nothing); version locks the header and changes
// N only when no slot's lease is in force, read with a snapshot taken
// after the lock (a grant holds the header FOR SHARE until it commits).
func (dialect) SemResize(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	slots := sqllock.S("INSERT INTO "+t.Sem+" (name, slot) SELECT $1::text, n FROM generate_series(1, $2::int) n ON CONFLICT (name, slot) DO NOTHING", r.Name, r.Permits)
	switch s {
	case sqllock.Native:
		return []sqllock.Stmt{sqllock.S(`WITH g AS (SELECT pg_try_advisory_xact_lock(`+semKey("$3::text", "0")+`) AS ok),
hd AS (INSERT INTO `+t.Sem+` AS t (name, slot, permits) SELECT $1::text, 0, $2::int FROM g WHERE ok ON CONFLICT (name, slot) DO UPDATE SET permits = excluded.permits)
SELECT FROM g`, r.Name, r.Permits, semBase(t, r.Name))}
	case sqllock.ForUpdate:
		return []sqllock.Stmt{
			sqllock.S("BEGIN"),
			sqllock.S("INSERT INTO "+t.Sem+" (name, slot, permits) VALUES ($1, 0, $2) ON CONFLICT (name, slot) DO NOTHING", r.Name, r.Permits),
			sqllock.S("SELECT 1 FROM "+t.Sem+" WHERE name = $1 AND slot = 0 FOR UPDATE NOWAIT", r.Name),
			sqllock.S("UPDATE "+t.Sem+" SET permits = $2 WHERE name = $1 AND slot = 0", r.Name, r.Permits),
			slots,
			sqllock.S("COMMIT"),
		}
	}
	return []sqllock.Stmt{
		sqllock.S("BEGIN"),
		sqllock.S("SELECT set_config('lock_timeout', '5000', true)"),
		sqllock.S("INSERT INTO "+t.Sem+" (name, slot, permits) VALUES ($1, 0, $2) ON CONFLICT (name, slot) DO NOTHING", r.Name, r.Permits),
		sqllock.S("SELECT 1 FROM "+t.Sem+" WHERE name = $1 AND slot = 0 FOR UPDATE", r.Name),
		sqllock.S("UPDATE "+t.Sem+" SET permits = $2 WHERE name = $1 AND slot = 0 AND NOT EXISTS (SELECT 1 FROM "+t.Sem+" WHERE name = $1 AND slot > 0 AND expires_at > now())", r.Name, r.Permits),
		slots,
		sqllock.S("COMMIT"),
	}
}

// SemVersionAcquire takes the first free or expired slot under the
// header's FOR SHARE (a SemResize waits for it), skipping slots that
// another attempt is taking; the token is the sequence's next value.
func (dialect) SemVersionAcquire(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S(`WITH h AS (SELECT permits FROM `+t.Sem+` WHERE name = $1 AND slot = 0 FOR SHARE NOWAIT),
s AS (SELECT slot FROM `+t.Sem+` WHERE name = $1 AND slot BETWEEN 1 AND $2 AND (SELECT permits FROM h) = $2
	AND (expires_at IS NULL OR expires_at <= now()) ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED),
up AS (UPDATE `+t.Sem+` AS t SET fence = `+nextval(t)+`, owner = $3, acquired_at = now(), expires_at = now() + $4::bigint * interval '1 microsecond', session = $5
	FROM s WHERE t.name = $1 AND t.slot = s.slot RETURNING t.fence)
SELECT (SELECT fence FROM up), (SELECT permits FROM h),
	(SELECT (extract(epoch FROM min(expires_at) - now()) * 1e6)::bigint FROM `+t.Sem+` WHERE name = $1 AND slot BETWEEN 1 AND $2 AND expires_at > now())`,
		r.Name, r.Permits, r.Owner, sqllock.Micros(r.TTL), r.Nonce)}
}

func (dialect) SemVersionRefresh(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S("UPDATE "+t.Sem+" SET expires_at = now() + $3::bigint * interval '1 microsecond' WHERE name = $1 AND slot > 0 AND fence = $2 AND expires_at > now() RETURNING true",
		r.Name, r.Token, sqllock.Micros(r.TTL))}
}

// SemVersionRelease frees the slot and notifies the semaphore's waiters
// (always: semaphores keep no registry of waiters).
func (dialect) SemVersionRelease(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S("WITH r AS (UPDATE "+t.Sem+" SET expires_at = NULL WHERE name = $1 AND slot > 0 AND fence = $2 AND expires_at > now() RETURNING 1)"+
		" SELECT pg_notify($3, $4) IS NULL FROM r",
		r.Name, r.Token, r.Channel, sqllock.SemWakeKey(r.Name))}
}

func (dialect) SemVersionAbort(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S("WITH r AS (UPDATE "+t.Sem+" SET expires_at = NULL WHERE name = $1 AND slot > 0 AND session = $2 AND expires_at > now() RETURNING 1)"+
		" SELECT count(pg_notify($3, $4)) FROM r",
		r.Name, r.Nonce, r.Channel, sqllock.SemWakeKey(r.Name))}
}
