package mysql

import "github.com/dlock-go/dlock/internal/sqllock"

var _ sqllock.AdminDialect = dialect{}

// Admin is the SQL that tests and operators use to reach MySQL's
// sessions (sqllock.AdminDialect); no strategy runs it.
func (dialect) Admin(t sqllock.Table) sqllock.Admin {
	return sqllock.Admin{
		// GET_LOCK's holder, else the forupdate holder's session from its
		// uncommitted row of the grant table (or, from a dlock before
		// that table, of the lock table), read dirty. Every placeholder
		// is the name. The
		// key is lockKey's: a name starting with "dlock#" in any case
		// (compared lowered, byte for byte) is hashed.
		Holder: []string{"SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED",
			"SELECT COALESCE(IS_USED_LOCK(IF(CHAR_LENGTH(?) <= 64 AND BINARY LOWER(LEFT(?, 6)) <> BINARY 'dlock#', ?, CONCAT('dlock#', LEFT(SHA2(?, 256), 58))))," +
				" (SELECT session FROM " + grantTable(t) + " WHERE name = ? ORDER BY id DESC LIMIT 1)," +
				" (SELECT session FROM " + t.Q + " WHERE name = ? AND session IS NOT NULL))"},
		Kill:   "KILL ?",
		Alive:  "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
		Expire: "UPDATE " + t.Q + " SET expires_at = NULL WHERE name = ?",
		// Sessions waiting for a row lock (InnoDB's LOCK WAIT) or in
		// GET_LOCK ("User lock"), other than the one asking.
		Waiters: "SELECT (SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT')" +
			" + (SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND ID <> CONNECTION_ID()) + 0 * LENGTH(?)",
	}
}
