package postgres

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/sqllock"
)

// dialect is PostgreSQL's SQL for the strategies of package sqllock.
type dialect struct{}

type stmts = []sqllock.Stmt

func st(sql string, args ...any) sqllock.Stmt { return sqllock.Stmt{SQL: sql, Args: args} }

func (dialect) Backend() string                 { return "postgres" }
func (dialect) NativeStrategy() string          { return "advisory" }
func (dialect) Quote(ident string) string       { return pgx.Identifier{ident}.Sanitize() }
func (dialect) MaxIdent() int                   { return 63 }
func (dialect) Placeholder(n int) string        { return "$" + strconv.Itoa(n) }
func (dialect) Classify(err error) sqllock.Kind { return classify(err) }

// ValidateName rejects NUL bytes, which a text column cannot store.
func (dialect) ValidateName(name string) error {
	if strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: postgres: a name must not contain a NUL byte", driver.ErrInvalidName)
	}
	return nil
}

// migrateKey serialises concurrent migrations (CREATE … IF NOT EXISTS
// races on the catalog's unique indexes).
const migrateKey = 0x646c6f636b // "dlock"

func (dialect) Migrate(t sqllock.Table) []sqllock.Stmt {
	return stmts{
		st("BEGIN"),
		st("SELECT pg_advisory_xact_lock(" + strconv.Itoa(migrateKey) + ")"),
		st("CREATE TABLE IF NOT EXISTS " + t.Q + ` (
	name text PRIMARY KEY,
	fence bigint NOT NULL DEFAULT 0,
	owner text NOT NULL DEFAULT '',
	acquired_at timestamptz,
	expires_at timestamptz,
	session bigint)`),
		st(createSeq(t)),
		st("COMMIT"),
	}
}

func (dialect) FoldIdent(ident string) string { return strings.ToLower(ident) }

func (dialect) Resolve(t sqllock.Table) []sqllock.Stmt {
	return stmts{st("SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)", t.Q)}
}

func (dialect) Claim(t sqllock.Table, strategy string) []sqllock.Stmt {
	return stmts{
		st("INSERT INTO "+t.Q+" (name, owner) VALUES ('', $1) ON CONFLICT (name) DO NOTHING", strategy),
		st("SELECT owner FROM " + t.Q + " WHERE name = ''"),
	}
}

// createSeq creates the token counter, starting at the server's clock in
// microseconds: a counter dropped and created again (with its table, by a
// migration, by hand) then goes on above every token the old one can have
// issued, unless that one issued more than a token per microsecond of its
// life or the server's clock went back.
func createSeq(t sqllock.Table) string {
	return "DO $dlock$ BEGIN EXECUTE format('CREATE SEQUENCE IF NOT EXISTS %s START %s', " + quoteLiteral(t.Seq) +
		", (extract(epoch FROM clock_timestamp()) * 1000000)::bigint); END $dlock$"
}

// Check reports nothing: every supported PostgreSQL keeps sequences
// durable.
func (dialect) Check(t sqllock.Table) []sqllock.Stmt { return stmts{st("SELECT ''::text")} }

func (dialect) EnsureRow(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	// NOT EXISTS reads the committed row without waiting; only a row
	// created and locked by another client in the meantime makes the
	// INSERT wait for its transaction, for no longer than r allows.
	return stmts{
		st("BEGIN"),
		st("SELECT set_config('lock_timeout', $1, true)", ensureTimeout(r)),
		st("INSERT INTO "+t.Q+" (name) SELECT $1::text WHERE NOT EXISTS (SELECT 1 FROM "+t.Q+" WHERE name = $1) ON CONFLICT (name) DO NOTHING", r.Name),
		st("COMMIT"),
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
	// while its token is made durable on another connection (a commit
	// with synchronous_commit on) and, for a short TTL, is pinged once
	// more; a TTL shorter than that round trip and flush lets the server's
	// idle_in_transaction_session_timeout end the lease before Acquire
	// returns it (measured: most attempts at 5ms, none at 50ms).
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

func lockTimeout(r sqllock.Req) string {
	if r.Wait <= 0 {
		return "0"
	}
	return strconv.FormatInt(timeoutMS(r.Wait), 10)
}

func (d dialect) Lock(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	ttl := strconv.FormatInt(timeoutMS(r.TTL), 10)
	set := func(idle string, local bool) sqllock.Stmt {
		return st("SELECT set_config('lock_timeout', $1, true), set_config('"+idle+"', $2, "+strconv.FormatBool(local)+")", lockTimeout(r), ttl)
	}
	if s == sqllock.ForUpdate {
		nowait := ""
		if r.NoWait {
			nowait = " NOWAIT"
		}
		return stmts{
			st("BEGIN"),
			set("idle_in_transaction_session_timeout", true),
			st("WITH l AS (SELECT name FROM "+t.Q+" WHERE name = $1 FOR UPDATE"+nowait+") UPDATE "+t.Q+" AS t SET fence = "+nextval(t)+
				", owner = $2, acquired_at = now(), expires_at = NULL, session = pg_backend_pid() FROM l WHERE t.name = l.name RETURNING t.fence",
				r.Name, r.Owner),
		}
	}
	// Native: the batch is one implicit transaction, so set_config(…, true)
	// bounds only this wait; idle_session_timeout stays on the session.
	// The token is a sequence value taken after the grant: no row is
	// written, the sequence alone keeps tokens increasing.
	key := advisoryKey(t, r.Name)
	if r.NoWait {
		return stmts{set("idle_session_timeout", false), st("SELECT "+nextval(t)+" WHERE pg_try_advisory_lock($1)", key)}
	}
	return stmts{set("idle_session_timeout", false), st("SELECT pg_advisory_lock($1)", key), st("SELECT " + nextval(t))}
}

// Persist commits a transaction that writes WAL (a transactional logical
// message, which any role may emit, at every wal_level) with
// synchronous_commit on, whatever the server's default: its commit
// flushes the WAL up to this point, the sequence's advance of an open
// forupdate transaction included (to disk with fsync on; to the operating
// system, which survives a crash of the server, with fsync off).
func (dialect) Persist(t sqllock.Table) []sqllock.Stmt {
	// set_config runs first: its result is the message's content.
	return stmts{st("SELECT pg_logical_emit_message(true, 'dlock', set_config('synchronous_commit', 'on', true))")}
}

func (dialect) Abort(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if s == sqllock.ForUpdate {
		return stmts{st("ROLLBACK")}
	}
	// The connection is pinned for this lease alone: no other advisory
	// lock of the session can be ours to keep.
	return stmts{st("SELECT pg_advisory_unlock_all()"), st("RESET idle_session_timeout")}
}

func (dialect) Ping(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return stmts{st("SELECT true")}
}

func (dialect) Unlock(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	if s == sqllock.ForUpdate {
		return stmts{st("COMMIT")}
	}
	return stmts{st("RESET idle_session_timeout"), st("SELECT pg_advisory_unlock($1)", advisoryKey(t, r.Name))}
}

func (dialect) VersionAcquire(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return stmts{st(`WITH prev AS (SELECT (extract(epoch FROM expires_at - now()) * 1e6)::bigint AS rem FROM `+t.Q+` WHERE name = $1),
up AS (INSERT INTO `+t.Q+` AS t (name, fence, owner, acquired_at, expires_at, session) VALUES ($1, `+nextval(t)+`, $2, now(), now() + $3::bigint * interval '1 microsecond', $4)
	ON CONFLICT (name) DO UPDATE SET fence = `+nextval(t)+`, owner = excluded.owner, acquired_at = excluded.acquired_at,
		expires_at = excluded.expires_at, session = excluded.session
	WHERE t.expires_at IS NULL OR t.expires_at <= now()
	RETURNING t.fence)
SELECT (SELECT fence FROM up), (SELECT rem FROM prev)`, r.Name, r.Owner, sqllock.Micros(r.TTL), r.Nonce)}
}

func (dialect) VersionRefresh(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return stmts{st("UPDATE "+t.Q+" SET expires_at = now() + $3::bigint * interval '1 microsecond' WHERE name = $1 AND fence = $2 AND expires_at > now() RETURNING true",
		r.Name, r.Token, sqllock.Micros(r.TTL))}
}

func (dialect) VersionRelease(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return stmts{st("WITH r AS (UPDATE "+t.Q+" SET expires_at = NULL WHERE name = $1 AND fence = $2 AND expires_at > now() RETURNING name) SELECT pg_notify($3, name) IS NULL FROM r",
		r.Name, r.Token, r.Channel)}
}

func (dialect) VersionAbort(t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	return stmts{st("WITH r AS (UPDATE "+t.Q+" SET expires_at = NULL WHERE name = $1 AND session = $2 AND expires_at > now() RETURNING name) SELECT count(pg_notify($3, name)) FROM r",
		r.Name, r.Nonce, r.Channel)}
}

func (dialect) Admin(t sqllock.Table) sqllock.Admin {
	// The forupdate holder's row version is uncommitted: its session is
	// found through the transaction that locked the row (xmax); the
	// advisory holder's through pg_locks and the name's key.
	holder := "SELECT l.pid::bigint FROM " + t.Q + " t JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = t.xmax" +
		" AND l.mode = 'ExclusiveLock' AND l.granted WHERE t.name = $1" +
		" UNION ALL SELECT l.pid::bigint FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted" +
		" AND ((l.classid::bigint << 32) | l.objid::bigint) = " + keySQL(t)
	return sqllock.Admin{
		Holder:  []string{holder},
		Kill:    "SELECT pg_terminate_backend($1::int)",
		Alive:   "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int",
		Expire:  "UPDATE " + t.Q + " SET expires_at = NULL WHERE name = $1 RETURNING true",
		Waiters: "SELECT count(*) FROM pg_stat_activity a WHERE a.wait_event_type = 'Lock' AND (" + holder + " LIMIT 1) = ANY(pg_blocking_pids(a.pid))",
	}
}

// keySQL computes advisoryKey of the name $1 on the server.
func keySQL(t sqllock.Table) string {
	return "('x' || left(encode(sha256(convert_to(" + quoteLiteral(t.Key()) + ", 'UTF8') || '\\x00'::bytea || convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint"
}

// quoteLiteral quotes a validated identifier as a string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
