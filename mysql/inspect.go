package mysql

import (
	"strings"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// Inspect reads a lock's state without taking it (sqllock.Dialect):
//
//   - forupdate: the holder's grant is an uncommitted row of the grant
//     table (its token, owner and session), read dirty (READ
//     UNCOMMITTED): the lock is held while it is there (a release or a
//     lost holder's rollback undoes it). A holder of a dlock before the
//     holder and grant tables wrote the lock's row instead, and is found
//     there as it used to be: held while the row's dirty fence differs
//     from the committed one. A free lock's fence is unknown: grants
//     commit nothing. Waiters are the transactions blocked by the holder's (MariaDB:
//     information_schema.INNODB_LOCK_WAITS; MySQL 8:
//     performance_schema.data_lock_waits, unknown when it is off).
//   - getlock: IS_USED_LOCK names the holder's connection; the row its
//     grant committed (Lock) gives its owner and token when its session
//     is that connection. Waiters are the connections running dlock's
//     GET_LOCK of the name (MySQL 8 with performance_schema: its pending
//     user-level locks).
//   - version: the lease row tells it all but the waiters, who poll.
func (dialect) Inspect(s sqllock.Strategy, t sqllock.Table, r sqllock.Req) []sqllock.Stmt {
	reset := sqllock.S("SET @dlock_if = NULL, @dlock_io = NULL, @dlock_is = NULL, @dlock_ic = NULL, @dlock_ih = NULL, @dlock_iw = NULL, @dlock_ik = NULL, @dlock_ip = NULL," +
		" @dlock_hf = NULL, @dlock_ho = NULL, @dlock_hs = NULL, @dlock_ix = NULL")
	// waiters counts into @dlock_iw with the query of the server at hand
	// (each takes its values from user variables, never from the text).
	waiters := func(mariadb, mysql8, other string) []sqllock.Stmt {
		return []sqllock.Stmt{
			sqllock.S("SET @dlock_iq = IF(VERSION() LIKE '%MariaDB%', ?, IF(@@performance_schema, ?, ?))", mariadb, mysql8, other),
			sqllock.S("PREPARE dlock_iq FROM @dlock_iq"),
			sqllock.S("EXECUTE dlock_iq"),
			sqllock.S("DEALLOCATE PREPARE dlock_iq"),
		}
	}
	switch s {
	case sqllock.ForUpdate:
		// The holder's row in the grant table, read dirty, else (a
		// holder of a dlock before the holder and grant tables) its
		// uncommitted update of the lock's row: held while that fence
		// differs from the committed one. A SET evaluates all its values
		// before it assigns any.
		held := "@dlock_ix"
		blocked := " WHERE x.trx_mysql_thread_id = @dlock_is AND " + held
		out := []sqllock.Stmt{reset,
			sqllock.S("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED"),
			sqllock.S("SELECT id, owner, session INTO @dlock_hf, @dlock_ho, @dlock_hs FROM "+grantTable(t)+" WHERE name = ? ORDER BY id DESC LIMIT 1", r.Name),
			sqllock.S("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED"),
			sqllock.S("SELECT fence, owner, session INTO @dlock_if, @dlock_io, @dlock_is FROM "+t.Q+" WHERE name = ?", r.Name),
			sqllock.S("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"),
			sqllock.S("SELECT fence INTO @dlock_ic FROM "+t.Q+" WHERE name = ?", r.Name),
			sqllock.S("SET @dlock_ix = IFNULL(@dlock_hf IS NOT NULL OR @dlock_if <> @dlock_ic, FALSE), @dlock_if = IFNULL(@dlock_hf, @dlock_if)," +
				" @dlock_io = IF(@dlock_hf IS NULL, @dlock_io, @dlock_ho), @dlock_is = IF(@dlock_hf IS NULL, @dlock_is, @dlock_hs)"),
		}
		out = append(out, waiters(
			"SELECT COUNT(DISTINCT w.requesting_trx_id) INTO @dlock_iw FROM information_schema.INNODB_LOCK_WAITS w"+
				" JOIN information_schema.INNODB_TRX x ON x.trx_id = w.blocking_trx_id"+blocked,
			"SELECT COUNT(DISTINCT w.REQUESTING_ENGINE_TRANSACTION_ID) INTO @dlock_iw FROM performance_schema.data_lock_waits w"+
				" JOIN information_schema.INNODB_TRX x ON x.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID"+blocked,
			"SET @dlock_iw = NULL")...)
		return append(out, sqllock.S("SELECT "+held+", IF("+held+", @dlock_io, NULL), IF("+held+", @dlock_if, NULL), NULL, @dlock_iw"))
	case sqllock.Native:
		key := lockKey(r.Name)
		out := []sqllock.Stmt{reset,
			sqllock.S("SET @dlock_ik = ?, @dlock_ip = ?, @dlock_ih = IS_USED_LOCK(?)", key, getLockCall(key), key),
			sqllock.S("SELECT fence, owner, session INTO @dlock_if, @dlock_io, @dlock_is FROM "+t.Q+" WHERE name = ?", r.Name),
		}
		// A waiter runs Lock's GET_LOCK with its arguments interpolated
		// (dlock's default); MySQL 8's performance_schema lists it.
		byStatement := "SELECT COUNT(*) INTO @dlock_iw FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND = 'Query' AND LOCATE(@dlock_ip, INFO) > 0"
		out = append(out, waiters(byStatement,
			"SELECT COUNT(*) INTO @dlock_iw FROM performance_schema.metadata_locks WHERE OBJECT_TYPE = 'USER LEVEL LOCK' AND OBJECT_NAME = @dlock_ik AND LOCK_STATUS = 'PENDING'",
			byStatement)...)
		// The row is the holder's when it names the holder's connection
		// (a grant commits it a moment after GET_LOCK); a free lock's row
		// is its last grant's.
		return append(out, sqllock.S("SELECT @dlock_ih IS NOT NULL, IF(@dlock_is = @dlock_ih, @dlock_io, NULL),"+
			" IF(@dlock_ih IS NULL OR @dlock_is = @dlock_ih, @dlock_if, NULL), NULL, @dlock_iw"))
	}
	return []sqllock.Stmt{sqllock.S("SELECT IFNULL(MAX(expires_at > UTC_TIMESTAMP(6)), FALSE), MAX(owner), MAX(fence),"+
		" MAX(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)), NULL FROM "+t.Q+" WHERE name = ?", r.Name)}
}

// getLockCall is how a waiter's GET_LOCK of key reads in the server's
// process list: go-sql-driver's interpolation of Lock's statement (the
// string escaped with backslashes, the server's default mode).
func getLockCall(key string) string {
	esc := strings.NewReplacer("\x00", `\0`, "\n", `\n`, "\r", `\r`, "\x1a", `\Z`, "'", `\'`, `"`, `\"`, `\`, `\\`)
	return "GET_LOCK('" + esc.Replace(key) + "', "
}
