package postgres

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/sqllock"
)

// dialect is PostgreSQL's SQL for the strategies of package sqllock.
type dialect struct{}

var _ sqllock.RowCreator = dialect{}

// CreatesRow: forupdate's Lock creates a new name's row in its own batch
// (Req.Create); VersionAcquire creates it with Create, and without it
// takes a known name's row by a plain UPDATE, whose missing row the core
// answers with Create.
func (dialect) CreatesRow() {}

func (dialect) Backend() string           { return "postgres" }
func (dialect) NativeStrategy() string    { return "advisory" }
func (dialect) Quote(ident string) string { return pgx.Identifier{ident}.Sanitize() }
func (dialect) MaxIdent() int             { return 63 }
func (dialect) Placeholder(n int) string  { return "$" + strconv.Itoa(n) }

// ValidateName rejects NUL bytes, which a text column cannot store.
func (dialect) ValidateName(name string) error {
	if strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: postgres: a name must not contain a NUL byte", driver.ErrInvalidName)
	}
	return nil
}

// Classify maps PostgreSQL's errors to the core's kinds: SQLSTATE 55P03
// (lock_not_available: NOWAIT or lock_timeout), 40P01 (deadlock), class 08
// and 57P (connection, shutdown, terminated by pg_terminate_backend) and
// every FATAL error or non-server error (I/O, context) break the
// connection.
func (dialect) Classify(err error) sqllock.Kind {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return sqllock.KindBroken
	}
	switch {
	case pe.Code == "55P03":
		return sqllock.KindBusy
	case pe.Code == "40P01":
		return sqllock.KindDeadlock
	case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "57P"),
		pe.Severity == "FATAL", pe.Severity == "PANIC":
		return sqllock.KindBroken
	}
	return sqllock.KindOther
}

// migrateKey serialises concurrent migrations (CREATE … IF NOT EXISTS
// races on the catalog's unique indexes).
const migrateKey = 0x646c6f636b // "dlock"

func (dialect) Migrate(t sqllock.Table) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("BEGIN"),
		sqllock.S("SELECT pg_advisory_xact_lock(" + strconv.Itoa(migrateKey) + ")"),
		sqllock.S("CREATE TABLE IF NOT EXISTS " + t.Q + ` (
	name text PRIMARY KEY,
	fence bigint NOT NULL DEFAULT 0,
	owner text NOT NULL DEFAULT '',
	acquired_at timestamptz,
	expires_at timestamptz,
	session bigint,
	waiters_until timestamptz,
	queue jsonb,
	granted_to text)`),
		sqllock.S(addColumn(t, "waiters_until", "timestamptz")),
		sqllock.S(addColumn(t, "queue", "jsonb")),
		sqllock.S(addColumn(t, "granted_to", "text")),
		sqllock.S("CREATE UNLOGGED TABLE IF NOT EXISTS " + t.Live + " (since timestamptz NOT NULL DEFAULT now())"),
		sqllock.S(createSeq(t)),
		sqllock.S(createSem(t)),
		sqllock.S("COMMIT"),
	}
}

// addColumn adds a column to a lock table created before it existed
// (waiters_until: the registry of waiters of releases before the grant
// queue; queue and granted_to: the version strategy's grant queue,
// VersionWait, and the channel of the waiter it granted the lease to).
// ALTER TABLE would wait for every open transaction on the table (each
// held forupdate lease) even when the column exists, so it runs only when
// missing.
func addColumn(t sqllock.Table, name, typ string) string {
	return "DO $dlock$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(" + quoteLiteral(t.Q) +
		") AND attname = '" + name + "' AND NOT attisdropped) THEN ALTER TABLE " + t.Q + " ADD COLUMN " + name + " " + typ + "; END IF; END $dlock$"
}

func (dialect) FoldIdent(ident string) string { return strings.ToLower(ident) }

func (dialect) Resolve(t sqllock.Table) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S("SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)", t.Q)}
}

func (dialect) Claim(t sqllock.Table, strategy string) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("INSERT INTO "+t.Q+" (name, owner) VALUES ('', $1) ON CONFLICT (name) DO NOTHING", strategy),
		sqllock.S("SELECT owner FROM " + t.Q + " WHERE name = ''"),
	}
}

// createSeq creates the token counter, starting at the server's clock in
// microseconds: a counter dropped and created again (with its table, by a
// migration, by hand) then goes on above every token the old one can have
// issued, unless that one issued more than a token per microsecond of its
// life, the server's clock went back, or the old counter was moved on by
// Recover (counterJump) within the last counterJump microseconds. A new
// counter clears the marker, so that its first forupdate grant runs
// Recover and starts counterJump above the clock.
func createSeq(t sqllock.Table) string {
	return "DO $dlock$ BEGIN IF to_regclass(" + quoteLiteral(t.Seq) + ") IS NULL THEN EXECUTE format('CREATE SEQUENCE %s START %s', " + quoteLiteral(t.Seq) +
		", (extract(epoch FROM clock_timestamp()) * 1000000)::bigint); DELETE FROM " + t.Live + "; END IF; END $dlock$"
}

// Check reports nothing: every supported PostgreSQL keeps sequences
// durable.
func (dialect) Check(t sqllock.Table) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S("SELECT ''::text")}
}

func (dialect) EnsureRow(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	// NOT EXISTS reads the committed row without waiting; only a row
	// created and locked by another client in the meantime makes the
	// INSERT wait for its transaction, for no longer than r allows.
	return []sqllock.Stmt{
		sqllock.S("BEGIN"),
		sqllock.S("SELECT set_config('lock_timeout', $1, true)", ensureTimeout(r)),
		sqllock.S("INSERT INTO "+t.Q+" (name) SELECT $1::text WHERE NOT EXISTS (SELECT 1 FROM "+t.Q+" WHERE name = $1) ON CONFLICT (name) DO NOTHING", r.Name),
		sqllock.S("COMMIT"),
	}
}

// ensureTimeout is EnsureRow's lock_timeout: 1ms (0 would disable it)
// for NoWait.
func ensureTimeout(r sqllock.Req) string {
	if r.NoWait {
		return "1"
	}
	return lockTimeout(r)
}

// nextval is the token: a sequence value, never rolled back.
func nextval(t sqllock.Table) string { return "nextval(" + quoteLiteral(t.Seq) + ")" }

// advisoryKey is the 64-bit key of a name's advisory lock: the first 8
// bytes of SHA-256 over the table (schema.table, as the server resolves
// it) and the name. Two names share a key with
// probability 2^-64 per pair (about 2.7e-8 for a million names in use at
// once); they would then exclude each other, never both be held.
func advisoryKey(t sqllock.Table, name string) int64 {
	h := sha256.New()
	h.Write([]byte(t.Key()))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// Server limits: lock_timeout, idle_in_transaction_session_timeout and
// idle_session_timeout are int (32-bit) milliseconds.
const (
	maxTimeoutMS  = math.MaxInt32
	maxPinnedTTL  = maxTimeoutMS * time.Millisecond
	maxVersionTTL = 10 * 365 * 24 * time.Hour
	minVersionTTL = 5 * time.Millisecond
	// minForUpdateTTL: a forupdate grant sits idle in its transaction
	// until Acquire returns and, for a short TTL, is pinged once more; a
	// TTL shorter than that lets the server's
	// idle_in_transaction_session_timeout end the lease before Acquire
	// returns it (measured when a commit on another connection made each
	// token durable: most attempts at 5ms, none at 50ms; kept at 50ms).
	minForUpdateTTL = 50 * time.Millisecond
	minAdvisoryTTL  = 5 * time.Millisecond
)

// TTLRange: the connection strategies set an int32-millisecond timeout
// to the TTL; version leases expire at now() plus the TTL as an interval,
// far inside timestamptz's range for every TTL up to maxVersionTTL.
func (dialect) TTLRange(s sqllock.Strategy) (lo, hi time.Duration) {
	switch s {
	case sqllock.Version:
		return minVersionTTL, maxVersionTTL
	case sqllock.ForUpdate:
		return minForUpdateTTL, maxPinnedTTL
	}
	return minAdvisoryTTL, maxPinnedTTL
}

// timeoutMS is a server timeout of at least d: whole milliseconds rounded
// up, within 1 and the server's largest.
func timeoutMS(d time.Duration) int64 { return sqllock.CeilMillis(d, 1, maxTimeoutMS) }

// lockTimeout is the lock_timeout of r's wait: its bound less
// sqllock.WaitMargin ("0": no bound), so that the server ends a wait
// before the context's deadline would cost the connection.
func lockTimeout(r sqllock.Req) string {
	if r.Wait <= 0 {
		return "0"
	}
	return strconv.FormatInt(timeoutMS(sqllock.ServerWait(r, time.Millisecond)), 10)
}

func (d dialect) Lock(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	ttl := strconv.FormatInt(timeoutMS(r.TTL), 10)
	if s == sqllock.ForUpdate {
		// The row is locked, then the token taken from the counter
		// (never rolled back) while the marker shows that the counter
		// has been moved on since the server's last crash (Recover;
		// else the token is 0). Nothing is written but the row lock and
		// the counter's advance, neither flushed: the release rolls back.
		// A lease with an Owner announces its token and owner (for
		// Inspect); one without announces nothing (Inspect shows it
		// held, token and owner unknown, as on advisory): setting
		// application_name costs the grant a setting saved and put back
		// and the client two ParameterStatus messages.
		//
		// One statement after BEGIN (a statement more in the batch cost
		// a grant more than its settings): a blocking wait's
		// lock_timeout is set by a filter of the row's scan, which the
		// server evaluates before the row lock is taken (the locking
		// step sits above the scan) and so before any wait for it;
		// NOWAIT does not wait. The idle timeout need only hold once the
		// transaction is idle: the final SELECT sets it on the grant, for
		// the transaction alone. On the driver's own connections the
		// release makes both settings the session's, and the next grant
		// that the session's serve skips them (conn.sessionSettings).
		args := []any{r.Name, ttl}
		if !r.NoWait {
			args = append(args, lockTimeout(r))
		}
		if r.Owner != "" {
			args = append(args, r.Owner)
		}
		q := cached(t, stmtKind{name: "forupdate", noWait: r.NoWait, owner: r.Owner != ""}, func() string {
			v := &grantVariants{wait: !r.NoWait}
			for skip := range v.q {
				v.q[skip] = forUpdateGrant(t, r, skip&skipIdle == 0, skip&skipWait == 0)
			}
			grantVariantsOf.Store(v.q[0], v)
			return v.q[0]
		})
		lock := []sqllock.Stmt{sqllock.S("BEGIN"), sqllock.S(q, args...)}
		if r.Create {
			// A name this Locker has not seen: its row is created first
			// if missing, committed on its own as EnsureRow does, in the
			// same batch (one round trip, where a failed lock, its
			// rollback, EnsureRow and the lock again took four).
			return append(d.EnsureRow(t, r), lock...)
		}
		return lock
	}
	// Native: one statement, in which the server takes the lock, then the
	// token, then sets the session's idle timeout and announcement, each
	// step an argument or a row source of the next, so that the order is
	// the evaluation's, not the planner's choice. Until the grant nothing
	// changes but the statement's own lock_timeout (local to its implicit
	// transaction); an error rolls every setting back (an advisory lock
	// taken stays: Abort unlocks it). The session's values before the
	// grant are saved in dlock.idle and dlock.app for Unlock to put back.
	// OFFSET 0 keeps each subquery from being merged into the next.
	args := []any{advisoryKey(t, r.Name), r.Owner, ttl}
	if !r.NoWait {
		args = append(args, lockTimeout(r))
	}
	q := cached(t, stmtKind{name: "advisory", noWait: r.NoWait}, func() string {
		return "SELECT f FROM (" + advisoryGrant(t, r, "$4") + ") g WHERE " +
			"set_config('idle_session_timeout', CASE WHEN " + save("dlock.idle", "idle_session_timeout") + " THEN $3::text END, false) IS NOT NULL AND " +
			"set_config('application_name', CASE WHEN " + save("dlock.app", "application_name") + " THEN '" + appPrefix + " ' || f || ' ' || $2::text END, false) IS NOT NULL"
	})
	return []sqllock.Stmt{sqllock.S(q, args...)}
}

// forUpdateGrant is the query of a forupdate grant (see Lock): the row
// locked, the token taken, with setIdle the transaction's
// idle_in_transaction_session_timeout set, and with setWait a wait's
// lock_timeout. Its arguments are Lock's: the name, the idle timeout, a
// wait's lock_timeout, the owner. Without setIdle or setWait, the variants
// for a session whose own settings serve already (conn.sessionSettings),
// the setting is not an argument (the later ones move up), and a grant that
// waits for nothing, sets nothing and announces nothing is the floor's
// statement.
func forUpdateGrant(t sqllock.Table, r sqllock.Req, setIdle, setWait bool) string {
	n := 1
	next := func() string { n++; return "$" + strconv.Itoa(n) }
	var grant []string
	if setIdle {
		grant = append(grant, "set_config('idle_in_transaction_session_timeout', "+next()+", true) IS NOT NULL")
	}
	nowait, timeout := " NOWAIT", ""
	if !r.NoWait {
		nowait = ""
		if setWait {
			timeout = " AND set_config('lock_timeout', " + next() + ", true) IS NOT NULL"
		}
	}
	if r.Owner != "" {
		grant = append(grant, announce("f", next()+"::text", true))
	}
	lock := "SELECT name FROM " + t.Q + " WHERE name = $1" + timeout + " FOR UPDATE" + nowait
	token := "CASE WHEN EXISTS (SELECT 1 FROM " + t.Live + ") THEN " + nextval(t) + " ELSE 0 END"
	if len(grant) == 0 {
		return "WITH l AS MATERIALIZED (" + lock + ") SELECT " + token + " FROM l"
	}
	return "WITH l AS (" + lock + "), g AS (SELECT " + token + " AS f FROM l) SELECT f FROM g WHERE " + strings.Join(grant, " AND ")
}

// grantVariants are a forupdate grant query's variants (forUpdateGrant),
// indexed by the settings they leave to the session (skipIdle, skipWait):
// q[0] sets both, as Lock returns it. Each variant takes Lock's arguments
// but those of the settings it skips: the idle timeout is the second, a
// wait's lock_timeout (wait) the third.
type grantVariants struct {
	wait bool
	q    [4]string
}

const (
	skipIdle = 1 << iota
	skipWait
)

// grantVariantsOf maps each forupdate grant query that Lock returns to its
// variants.
var grantVariantsOf sync.Map

// advisoryGrant is the query of an advisory grant: one row, the token,
// when the lock of key $1 is taken (OFFSET 0 keeps the WHERE from being
// merged into an outer query). A wait (not r.NoWait) tries first and only
// when that fails waits, under the statement's own lock_timeout
// (parameter timeout): a free lock costs what a try costs (setting
// lock_timeout, even local to the statement, costs the server more than
// the lock). The server hands a released lock to its first waiter at
// once, so a try never overtakes a waiter: the wait queues behind every
// earlier one, as a wait alone would.
func advisoryGrant(t sqllock.Table, r sqllock.Req, timeout string) string {
	cond := "pg_try_advisory_lock($1)"
	if !r.NoWait {
		cond = "CASE WHEN pg_try_advisory_lock($1) THEN true ELSE pg_advisory_lock(CASE WHEN set_config('lock_timeout', " + timeout + ", true) IS NOT NULL THEN $1::bigint END) IS NOT NULL END"
	}
	return "SELECT " + nextval(t) + " AS f WHERE " + cond + " OFFSET 0"
}

var _ sqllock.Sharer = dialect{}

// Dedicated: a lease with an Owner announces its token and owner in its
// session's application_name (announce), where Inspect reads them, so it
// needs a session of its own; leases without one share sessions and
// announce nothing (Inspect shows them held, token and owner unknown).
func (dialect) Dedicated(r sqllock.Req) bool { return r.Owner != "" }

// SharedLock takes the advisory lock and then the token in one statement,
// as Lock does, but leaves the session's application_name alone and sets
// its idle timeout only with setup (saving the session's value in
// dlock.idle for Reset): every lease of a shared session has its TTL.
func (dialect) SharedLock(t sqllock.Table, r sqllock.Req, setup bool) []sqllock.Stmt {
	args := []any{advisoryKey(t, r.Name)}
	if !r.NoWait {
		args = append(args, lockTimeout(r))
	}
	if !setup {
		return []sqllock.Stmt{sqllock.S(cached(t, stmtKind{name: "shared", noWait: r.NoWait}, func() string { return advisoryGrant(t, r, "$2") }), args...)}
	}
	args = append(args, strconv.FormatInt(timeoutMS(r.TTL), 10))
	return []sqllock.Stmt{sqllock.S("SELECT f FROM ("+advisoryGrant(t, r, "$2")+") g WHERE "+
		"set_config('idle_session_timeout', CASE WHEN "+save("dlock.idle", "idle_session_timeout")+" THEN $"+strconv.Itoa(len(args))+"::text END, false) IS NOT NULL",
		args...)}
}

// SharedUnlock frees r's advisory lock alone.
func (dialect) SharedUnlock(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S("SELECT pg_advisory_unlock($1)", advisoryKey(t, r.Name))}
}

// Reset puts back the idle timeout that SharedLock's setup saved.
func (dialect) Reset(sqllock.Table) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S("SELECT set_config('idle_session_timeout', current_setting('dlock.idle'), false)")}
}

// save is a condition, always true, that copies the session's setting
// into the placeholder variable to.
func save(to, setting string) string {
	return "set_config('" + to + "', current_setting('" + setting + "'), false) IS NOT NULL"
}

// announce is a condition, always true, that sets the session's
// application_name to "dlock <token> <owner>" (local: until the end of the
// transaction): pg_stat_activity then shows every session the grant, and
// Inspect reads the holder's token and owner there, since a forupdate
// holder's row is uncommitted and an advisory lock writes no row. It
// costs no statement and no write on the way to a grant. The server
// keeps printable ASCII (other bytes become '?') and shows at most 63
// bytes of it.
func announce(token, owner string, local bool) string {
	return "set_config('application_name', '" + appPrefix + " ' || " + token + " || ' ' || " + owner + ", " + strconv.FormatBool(local) + ") IS NOT NULL"
}

// appPrefix starts the application_name of a session holding a lock.
const appPrefix = "dlock"

// counterJump is how far Recover moves the counter on: far more values
// than the server can have issued without their advance reaching the WAL
// on disk (a sequence logs its advance 32 values ahead; the WAL writer
// writes every full WAL page, and the rest within wal_writer_delay, at
// most 10s; any commit flushes it all), or than a standby promoted after
// a failover can lag behind (2^36 values: 19 hours of a million
// nextval() a second).
const counterJump = 1 << 36

// Recover moves the counter on by counterJump and sets the marker (an
// UNLOGGED table: every crash recovery empties it, and a promoted standby
// has it empty), in a transaction whose commit is flushed
// (synchronous_commit on): the counter's jump is in the WAL on disk
// before any session can see the marker, and so before any token of the
// new incarnation is taken. The table lock serialises recoveries, waiting
// for as long as the context allows (lock_timeout 0: not the session's,
// which a grant's wait may have set); a recovery that finds the marker
// does nothing.
func (dialect) Recover(t sqllock.Table) []sqllock.Stmt {
	return []sqllock.Stmt{
		sqllock.S("BEGIN"),
		sqllock.S("SELECT set_config('synchronous_commit', 'on', true), set_config('lock_timeout', '0', true)"),
		sqllock.S("LOCK TABLE " + t.Live + " IN EXCLUSIVE MODE"),
		sqllock.S("SELECT setval(" + quoteLiteral(t.Seq) + ", s.last_value + " + strconv.FormatInt(counterJump, 10) + ") FROM " + t.Seq + " s WHERE NOT EXISTS (SELECT 1 FROM " + t.Live + ")"),
		sqllock.S("INSERT INTO " + t.Live + " (since) SELECT now() WHERE NOT EXISTS (SELECT 1 FROM " + t.Live + ")"),
		sqllock.S("COMMIT"),
	}
}

var _ sqllock.FencingNoter = dialect{}

// FencingNote: forupdate's token is not made durable per grant.
func (dialect) FencingNote(s sqllock.Strategy, t sqllock.Table) string {
	if s != sqllock.ForUpdate {
		return ""
	}
	return "value of a sequence that is never rolled back (" + t.Raw + sqllock.SeqSuffix + "), taken under the row lock; after every crash recovery or failover (an UNLOGGED marker, " + t.Raw + sqllock.LiveSuffix + ", found empty) the sequence is moved on by 2^36 in a flushed commit before the next token"
}

func (dialect) Abort(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if r.Permits > 0 {
		return semAbort(s, r)
	}
	if s == sqllock.ForUpdate {
		return []sqllock.Stmt{sqllock.S("ROLLBACK")}
	}
	if r.Missed {
		return nil // not granted: the statement changed nothing
	}
	// The connection is pinned for this lease alone: no other advisory
	// lock of the session can be ours to keep.
	return []sqllock.Stmt{sqllock.S("SELECT pg_advisory_unlock_all()"), sqllock.S("RESET idle_session_timeout"), sqllock.S("RESET application_name")}
}

func (dialect) Ping(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S("SELECT true")}
}

func (dialect) Unlock(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if r.Permits > 0 {
		return semUnlock(s, t, r)
	}
	if s == sqllock.ForUpdate {
		// Nothing to keep: a rollback is not flushed.
		return []sqllock.Stmt{sqllock.S("ROLLBACK")}
	}
	// One statement: the settings the grant saved are put back (function
	// scans, run before the target list), and the lock freed.
	return []sqllock.Stmt{sqllock.S("SELECT pg_advisory_unlock($1) FROM set_config('idle_session_timeout', current_setting('dlock.idle'), false) i,"+
		" set_config('application_name', current_setting('dlock.app'), false) a", advisoryKey(t, r.Name))}
}

// VersionAcquire takes the lease when it is free or expired (TryAcquire:
// it never queues). A name this Locker has found (not r.Create) is taken
// by a plain UPDATE, the floor's statement (VersionPeeker): it costs the
// server less than the INSERT … ON CONFLICT that creates a missing row,
// and, failing, locks and writes nothing (ON CONFLICT DO UPDATE locks the
// row it finds even when its WHERE then fails); it answers the token
// alone, and no row when it took nothing (VersionPeek then reads the
// row). With r.Create the row is made when missing, and the answer is
// the token or NULL and the holder's remaining time.
func (dialect) VersionAcquire(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if !r.Create {
		return []sqllock.Stmt{sqllock.S(cached(t, stmtKind{name: "version take"}, func() string {
			return "UPDATE " + t.Q + " SET fence = " + nextval(t) + ", owner = $2, acquired_at = now(), expires_at = now() + $3::bigint * interval '1 microsecond', session = $4" +
				" WHERE name = $1 AND (expires_at IS NULL OR expires_at <= now()) RETURNING fence"
		}), r.Name, r.Owner, sqllock.Micros(r.TTL), r.Nonce)}
	}
	return []sqllock.Stmt{sqllock.S(cached(t, stmtKind{name: "version acquire"}, func() string {
		return `WITH prev AS (SELECT ` + remaining + ` AS rem FROM ` + t.Q + ` WHERE name = $1),
up AS (INSERT INTO ` + t.Q + ` AS t (name, fence, owner, acquired_at, expires_at, session) VALUES ($1, ` + nextval(t) + `, $2, now(), now() + $3::bigint * interval '1 microsecond', $4)
	ON CONFLICT (name) DO UPDATE SET fence = ` + nextval(t) + `, owner = excluded.owner, acquired_at = excluded.acquired_at,
		expires_at = excluded.expires_at, session = excluded.session
	WHERE t.expires_at IS NULL OR t.expires_at <= now()
	RETURNING t.fence)
SELECT (SELECT fence FROM up), (SELECT rem FROM prev)`
	}), r.Name, r.Owner, sqllock.Micros(r.TTL), r.Nonce)}
}

// remaining is the microseconds a row's lease still lasts.
const remaining = "(extract(epoch FROM expires_at - now()) * 1e6)::bigint"

var _ sqllock.VersionPeeker = dialect{}

// VersionPeek reads how long the name's lease still lasts, after a take
// that took nothing: no row when the name has none.
func (dialect) VersionPeek(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S(cached(t, stmtKind{name: "version peek"}, func() string {
		return "SELECT " + remaining + " FROM " + t.Q + " WHERE name = $1"
	}), r.Name)}
}

func (dialect) VersionRefresh(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S(cached(t, stmtKind{name: "version refresh"}, func() string {
		return sqllock.ChangedTag + "UPDATE " + t.Q + " SET expires_at = now() + $3::bigint * interval '1 microsecond' WHERE name = $1 AND fence = $2 AND expires_at > now()"
	}), r.Name, r.Token, sqllock.Micros(r.TTL))}
}

// VersionRefreshBatch is VersionRefresh for many leases in one
// statement (the same text for any number): its answer is how many it
// extended.
func (dialect) VersionRefreshBatch(t sqllock.Table, ttl time.Duration, rs []sqllock.Req) []sqllock.Stmt {
	names, tokens := make([]string, len(rs)), make([]int64, len(rs))
	for i, r := range rs {
		names[i], tokens[i] = r.Name, r.Token
	}
	return []sqllock.Stmt{sqllock.S(cached(t, stmtKind{name: "version refresh batch"}, func() string {
		return "WITH u AS (UPDATE " + t.Q + " AS x SET expires_at = now() + $3::bigint * interval '1 microsecond'" +
			" FROM unnest($1::text[], $2::bigint[]) AS b(name, fence)" +
			" WHERE x.name = b.name AND x.fence = b.fence AND x.expires_at > now() RETURNING 1)" +
			" SELECT count(*) FROM u"
	}), names, tokens, sqllock.Micros(ttl))}
}

// nowMicros is the server's now() in microseconds since the epoch: the
// clock of the grant queue's entries.
const nowMicros = "(extract(epoch FROM now()) * 1e6)::bigint"

// entries lists the elements x of the grant queue q with their
// positions i (1, 2, …).
func entries(q string) string {
	return "jsonb_array_elements(" + q + ") WITH ORDINALITY AS q(x, i)"
}

// liveWaiters counts the entries of the grant queue q that have not
// expired (handover).
func liveWaiters(q string) string {
	return "(SELECT count(*) FROM " + entries(q) + " WHERE (x->>'e')::bigint > " + nowMicros + ")"
}

// handover is the statement that ends a holder's lease and hands it to
// the first live waiter of the row's grant queue (column queue: entries
// {"w": nonce, "o": owner, "t": TTL µs, "c": channel, "e": expiry µs on
// the server's clock}, in arrival order), in one round trip: match picks
// the row (with $1 the name and $2 the token or the nonce), held says
// whether its lease is the one to end, and an entry of nonce me (SQL;
// "NULL" for none) leaves the queue whatever held says.
//
// One UPDATE computes the row's new values from the queue in one
// sub-SELECT evaluated on the row as updated (its scans of the queue
// guarded, so that a release with nobody queued costs little more than
// a plain UPDATE): a waiter that queued while
// the UPDATE waited for the row's lock is seen. The first entry that has
// not expired is granted: the row gets its nonce (session), owner, a new
// token, its TTL from now and its Locker's channel (granted_to), the
// entries up to it leave the queue (the ones before it had expired: their
// waiters died), and that channel is notified "<nonce> <token>". With no
// live entry the lease is freed, and the table's channel $3 is notified
// of the name while waiters of earlier versions registered in
// waiters_until.
func handover(t sqllock.Table, match, held, me string) string {
	// vars of the jsonpath filters: the server's now in microseconds and
	// the nonce to leave out (JSON null for none).
	vars := "jsonb_build_object('n', " + nowMicros + ", 'me', " + me + ")"
	// g.h is the entry granted (NULL: none), looked for once per row by
	// the sub-SELECT (written out in each column, it was evaluated once
	// per use: seven scans of the queue per release); none is looked for
	// while the queue is empty (NULL), so that such a release costs what
	// a plain UPDATE does.
	h := "g.h"
	return "WITH up AS (UPDATE " + t.Q + " AS t SET (fence, owner, session, acquired_at, expires_at, queue, granted_to) = (SELECT\n" +
		"\t\tCASE WHEN " + h + " IS NULL THEN t.fence ELSE " + nextval(t) + " END, coalesce(" + h + "->>'o', t.owner), coalesce((" + h + "->>'w')::bigint, t.session),\n" +
		"\t\tCASE WHEN " + h + " IS NULL THEN t.acquired_at ELSE now() END,\n" +
		"\t\tCASE WHEN " + h + " IS NOT NULL THEN now() + (" + h + "->>'t')::bigint * interval '1 microsecond' WHEN " + held + " THEN NULL ELSE t.expires_at END,\n" +
		"\t\tCASE WHEN t.queue IS NOT NULL THEN nullif(jsonb_path_query_array(t.queue, '$[*] ? (@.e > $n && @.w != $me && @.w != $h)', " + vars + " || jsonb_build_object('h', " + h + "->'w')), '[]') END,\n" +
		"\t\t" + h + "->>'c'\n" +
		"\t\tFROM (SELECT CASE WHEN t.queue IS NOT NULL AND " + held + " THEN jsonb_path_query_first(t.queue, '$[*] ? (@.e > $n && @.w != $me)', " + vars + ") END AS h) g)\n" +
		"\tWHERE t.name = $1 AND (" + match + ") RETURNING t.session, t.fence, t.granted_to, t.expires_at, t.waiters_until)\n" +
		"SELECT (CASE WHEN granted_to IS NOT NULL THEN pg_notify(granted_to, session || ' ' || fence) WHEN expires_at IS NULL AND waiters_until > now() THEN pg_notify($3, $1) END) IS NULL FROM up"
}

// VersionRelease frees the lease when nobody waits for it: no waiter
// queued, none of an earlier version registered in waiters_until (read on
// the row as updated). It is the floor's plain UPDATE, executed
// (sqllock.ChangedTag): no row when it freed nothing, and VersionHandover
// then hands the lease on, or frees it and notifies the table's channel
// for the registered waiters, or finds it no longer held.
func (dialect) VersionRelease(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S(cached(t, stmtKind{name: "version release"}, func() string {
		return sqllock.ChangedTag + "UPDATE " + t.Q + " SET expires_at = NULL WHERE name = $1 AND fence = $2 AND expires_at > now() AND queue IS NULL" +
			" AND (waiters_until IS NULL OR waiters_until <= now())"
	}), r.Name, r.Token)}
}

// VersionHandover frees the lease or hands it to the first live waiter
// of its grant queue (handover): one statement, one round trip.
func (dialect) VersionHandover(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S(cached(t, stmtKind{name: "version handover"}, func() string {
		return handover(t, "fence = $2 AND expires_at > now()", "true", "NULL")
	}), r.Name, r.Token, r.Channel)}
}

// VersionAbort takes the attempt r.Nonce back: its entry leaves the grant
// queue, and a lease granted to it (by its own statement, whose reply was
// lost, or by a release while it gave up waiting) is freed or handed on.
func (dialect) VersionAbort(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	mine := "session = $2 AND expires_at > now()"
	return []sqllock.Stmt{sqllock.S(handover(t, mine+" OR queue @> jsonb_build_array(jsonb_build_object('w', $2::bigint))", mine, "$2::bigint"), r.Name, r.Nonce, r.Channel)}
}

var _ sqllock.VersionQueuer = dialect{}

// VersionWait is a blocking Acquire's attempt and its waiter's renewal,
// in one statement. On a free or expired lease whose grant queue
// (handover) has no live entry before r.Nonce's, it takes the lease; on
// one with such an entry, it grants the lease to the first (notifying
// its channel, as a release does: a holder expired without a release
// hands on in order) and queues r.Nonce; on a lease a release granted to
// r.Nonce already (its notification lost or not yet read) it restarts
// the TTL and takes it; on a lease held by another it queues r.Nonce at
// the back, with its owner, TTL and channel, for entry on the server's
// clock, or renews its entry in place. Entries that expired leave the
// queue on the way. The row's ON CONFLICT lock orders the statement with
// every release: a release after it sees the entry.
func (dialect) VersionWait(t sqllock.Table, r sqllock.Req, entry time.Duration) []sqllock.Stmt {
	return []sqllock.Stmt{sqllock.S(cached(t, stmtKind{name: "version wait"}, func() string { return versionWait(t) }),
		r.Name, r.Owner, sqllock.Micros(r.TTL), r.Nonce, r.Channel, sqllock.Micros(entry))}
}

// versionWait is VersionWait's statement.
func versionWait(t sqllock.Table) string {
	const (
		me   = "$4::bigint"
		mine = "(x->>'w')::bigint = " + me
		free = "(t.expires_at IS NULL OR t.expires_at <= now())"
	)
	live := "(x->>'e')::bigint > " + nowMicros
	exp := nowMicros + " + $6::bigint"
	other := "h.x IS NOT NULL AND (h.x->>'w')::bigint <> " + me // the first live entry is another's
	grant := free + " AND " + other                             // hand on to it
	take := free + " AND NOT (" + other + ")"
	cut := "CASE WHEN " + grant + " THEN h.i ELSE 0 END"
	keep := "CASE WHEN t.queue IS NOT NULL THEN (SELECT jsonb_agg(x ORDER BY i) FROM " + entries("t.queue") + " WHERE " + live + " AND NOT " + mine + ") END"
	queued := "coalesce(CASE WHEN t.queue IS NOT NULL THEN (SELECT jsonb_agg(CASE WHEN " + mine + " THEN x || jsonb_build_object('e', " + exp + ") ELSE x END ORDER BY i) FROM " + entries("t.queue") +
		" WHERE i > " + cut + " AND (" + live + " OR " + mine + ")) END, '[]'::jsonb) ||\n" +
		"\t\t\tCASE WHEN t.queue IS NOT NULL AND EXISTS (SELECT FROM " + entries("t.queue") + " WHERE i > " + cut + " AND " + mine + ") THEN '[]'::jsonb" +
		" ELSE jsonb_build_array(jsonb_build_object('w', " + me + ", 'o', $2::text, 't', $3::bigint, 'c', $5::text, 'e', " + exp + ")) END"
	return `WITH prev AS (SELECT ` + remaining + ` AS rem FROM ` + t.Q + ` WHERE name = $1),
up AS (INSERT INTO ` + t.Q + ` AS t (name, fence, owner, acquired_at, expires_at, session) VALUES ($1, ` + nextval(t) + `, $2, now(), now() + $3::bigint * interval '1 microsecond', ` + me + `)
	ON CONFLICT (name) DO UPDATE SET (fence, owner, session, acquired_at, expires_at, queue, granted_to) = (SELECT
		CASE WHEN ` + free + ` THEN ` + nextval(t) + ` ELSE t.fence END,
		CASE WHEN ` + grant + ` THEN h.x->>'o' WHEN ` + take + ` THEN $2::text ELSE t.owner END,
		CASE WHEN ` + grant + ` THEN (h.x->>'w')::bigint WHEN ` + take + ` THEN ` + me + ` ELSE t.session END,
		CASE WHEN ` + free + ` THEN now() ELSE t.acquired_at END,
		CASE WHEN ` + grant + ` THEN now() + (h.x->>'t')::bigint * interval '1 microsecond'
			WHEN ` + take + ` OR t.session = ` + me + ` THEN now() + $3::bigint * interval '1 microsecond' ELSE t.expires_at END,
		CASE WHEN ` + take + ` OR (NOT ` + free + ` AND t.session = ` + me + `) THEN ` + keep + `
			ELSE ` + queued + ` END,
		CASE WHEN ` + grant + ` THEN h.x->>'c' END
		FROM (SELECT) o LEFT JOIN LATERAL (SELECT x, i FROM ` + entries("t.queue") + ` WHERE t.queue IS NOT NULL AND ` + live + ` ORDER BY i LIMIT 1) h ON true)
	RETURNING t.fence, t.session, t.granted_to, t.queue IS NOT NULL AS queued)
SELECT (SELECT CASE WHEN session = ` + me + ` THEN fence WHEN granted_to IS NOT NULL AND pg_notify(granted_to, session || ' ' || fence) IS NULL THEN NULL END FROM up),
	(SELECT rem FROM prev), (SELECT queued FROM up)`
}

// stmtKind names a cached statement (cached) of a table.
type stmtKind struct {
	name          string
	noWait, owner bool
}

// stmtKey is a cached statement's key: the table's quoted names, which
// are all its text depends on besides its kind.
type stmtKey struct {
	q, seq, live string
	kind         stmtKind
}

var (
	stmtsMu sync.RWMutex
	stmts   = map[stmtKey]string{}
)

// cached returns the text of the statement kind of table t, built once
// by build: the hot statements (a grant's, a release's, a waiter's) are
// long, and building each anew cost every lock use several allocations
// and copies.
func cached(t sqllock.Table, kind stmtKind, build func() string) string {
	k := stmtKey{t.Q, t.Seq, t.Live, kind}
	stmtsMu.RLock()
	q, ok := stmts[k]
	stmtsMu.RUnlock()
	if ok {
		return q
	}
	q = build()
	stmtsMu.Lock()
	stmts[k] = q
	stmtsMu.Unlock()
	return q
}

// quoteLiteral quotes a validated identifier as a string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
