package mysql_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestForUpdateTokenAfterCrash: a kill -9 of the server between two grants
// never makes the token go back (sqltest.TokenAfterCrash); the restart
// empties the MEMORY marker.
func TestForUpdateTokenAfterCrash(t *testing.T) {
	sqltest.TokenAfterCrash(t, testenv.NewMySQL(t, nil))
}

// TestSemaphoreTokensAfterCrash: a permit granted after a kill -9 of the
// server has a larger token than one granted before it, on every strategy
// (sqltest.SemTokensAfterRestart).
func TestSemaphoreTokensAfterCrash(t *testing.T) {
	sqltest.SemTokensAfterRestart(t, testenv.NewMySQL(t, nil), "getlock")
}
