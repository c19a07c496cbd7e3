package mysql_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestBasicStatementByStatement: without multi-statements a script runs
// statement by statement, and a getlock grant still reads its token from
// its write's OK packet.
func TestBasicStatementByStatement(t *testing.T) {
	sqltest.EachStrategy(t, sqltest.WithParams(testenv.MySQL(t).URL, "multiStatements", "false"), "getlock", sqltest.Basic)
}
