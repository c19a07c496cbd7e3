package mysql_test

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/mysql"
)

// TestSharedSessions: GET_LOCK leases share sessions, on pools of 8.
func TestSharedSessions(t *testing.T) {
	srv := testenv.MySQL(t)
	open := func() *dlock.Locker {
		db := openDB(t, srv.DSN)
		db.SetMaxOpenConns(8)
		l, err := mysql.OpenLocker(db, &mysql.Options{Strategy: "getlock", MultiStatements: true, Table: "shared_sessions"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	sqltest.SharedSessions(t, open(), open(), open(), 8)
}
