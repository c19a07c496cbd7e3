package postgres

import "github.com/dlock-go/dlock/internal/sqllock"

// Inspect reads a lock's state without taking it (sqllock.Dialect):
//
//   - forupdate: the holder is the session whose open transaction locked
//     the row (the committed row version's xmax, granted in pg_locks);
//     its token and owner are in its application_name (announce, by a
//     lease with an Owner; unknown otherwise), since its own row version
//     is uncommitted. Waiters are the sessions
//     queued for the row: for the holder's transaction or for the row's
//     tuple lock. A free lock's fence is unknown: grants write no row.
//   - advisory: the holder is the session granted the name's advisory
//     key in this database; token and owner as above; waiters are the
//     sessions queued for the key. No row is written: a free lock's fence
//     is unknown.
//   - version: the lease row tells it all; the waiters are the live
//     entries of its grant queue (handover).
func (dialect) Inspect(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	// owner and token of the holder pid h.pid, from its announcement.
	app := "(SELECT a.application_name FROM pg_stat_activity a WHERE a.pid = (SELECT pid FROM h))"
	ownerOf := "substring(" + app + " FROM '^" + appPrefix + " [0-9]+ (.*)$')"
	tokenOf := "substring(" + app + " FROM '^" + appPrefix + " ([0-9]+) ')::bigint"
	switch s {
	case sqllock.ForUpdate:
		return []sqllock.Stmt{sqllock.S(`WITH r AS (SELECT fence, xmax, ctid, tableoid FROM `+t.Q+` WHERE name = $1),
h AS (SELECT l.pid FROM r JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = r.xmax AND l.mode = 'ExclusiveLock' AND l.granted LIMIT 1)
SELECT EXISTS (SELECT 1 FROM h), `+ownerOf+`,
	CASE WHEN EXISTS (SELECT 1 FROM h) THEN `+tokenOf+` END,
	NULL::bigint,
	(SELECT count(DISTINCT w.pid) FROM r JOIN pg_locks w ON NOT w.granted AND (w.locktype = 'transactionid' AND w.transactionid = r.xmax
		OR w.locktype = 'tuple' AND w.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND w.relation = r.tableoid
			AND w.page = (r.ctid::text::point)[0]::int AND w.tuple = (r.ctid::text::point)[1]::int))::bigint`, r.Name)}
	case sqllock.Native:
		key := `l.locktype = 'advisory' AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND ((l.classid::bigint << 32) | l.objid::bigint) = $1`
		return []sqllock.Stmt{sqllock.S(`WITH h AS (SELECT l.pid FROM pg_locks l WHERE `+key+` AND l.granted LIMIT 1)
SELECT EXISTS (SELECT 1 FROM h), `+ownerOf+`, `+tokenOf+`, NULL::bigint,
	(SELECT count(*) FROM pg_locks l WHERE `+key+` AND NOT l.granted)`, advisoryKey(t, r.Name))}
	}
	return []sqllock.Stmt{sqllock.S(`SELECT COALESCE(t.expires_at > now(), false), t.owner, t.fence,
	(extract(epoch FROM t.expires_at - now()) * 1e6)::bigint, `+liveWaiters("t.queue")+`
FROM (SELECT $1::text AS name) q LEFT JOIN `+t.Q+` t ON t.name = q.name`, r.Name)}
}
