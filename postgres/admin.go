package postgres

import "github.com/dlock-go/dlock/internal/sqllock"

var _ sqllock.AdminDialect = dialect{}

// Admin is the SQL that tests and operators use to reach PostgreSQL's
// sessions (sqllock.AdminDialect); no strategy runs it.
func (dialect) Admin(t sqllock.Table) sqllock.Admin {
	// The forupdate holder's row version is uncommitted: its session is
	// found through the transaction that locked the row (xmax); the
	// advisory holder's through pg_locks and the name's key.
	holder := "SELECT l.pid::bigint FROM " + t.Q + " t JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = t.xmax" +
		" AND l.mode = 'ExclusiveLock' AND l.granted WHERE t.name = $1" +
		" UNION ALL SELECT l.pid::bigint FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted" +
		" AND ((l.classid::bigint << 32) | l.objid::bigint) = " + keySQL(t)
	return sqllock.Admin{
		Holder: []string{holder},
		Kill:   "SELECT pg_terminate_backend($1::int)",
		Alive:  "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int",
		Expire: "UPDATE " + t.Q + " SET expires_at = NULL WHERE name = $1 RETURNING true",
		// Sessions waiting for the holder's row or key, and the version
		// strategy's queued waiters.
		Waiters: "SELECT count(*) + (SELECT coalesce(sum(" + liveWaiters("t.queue") + "), 0) FROM " + t.Q + " t WHERE t.name = $1) FROM pg_stat_activity a" +
			" WHERE a.wait_event_type = 'Lock' AND (" + holder + " LIMIT 1) = ANY(pg_blocking_pids(a.pid))",
	}
}

// keySQL computes advisoryKey of the name $1 on the server.
func keySQL(t sqllock.Table) string {
	return "('x' || left(encode(sha256(convert_to(" + quoteLiteral(t.Key()) + ", 'UTF8') || '\\x00'::bytea || convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint"
}
