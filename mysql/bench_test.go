package mysql_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// BenchmarkUncontended: Acquire+Release of a free lock per strategy ÷
// the hand-written floor of that strategy on one connection
// (internal/floor: BEGIN; SELECT … FOR UPDATE / COMMIT for forupdate, a
// lease row's conditional UPDATEs for version, GET_LOCK / RELEASE_LOCK
// for getlock); medians of one run (target ratio <= 1.3).
func BenchmarkUncontended(b *testing.B) {
	sqltest.BenchUncontended(b, testenv.MySQL(b).URL, sqltest.Strategies("getlock"))
}

// BenchmarkContended: 8 workers, hold 1ms, 2ms between; grants/s ÷
// 1/(hold + one round trip) (targets: forupdate, getlock >= 0.9; version
// polls and has no target).
func BenchmarkContended(b *testing.B) {
	sqltest.BenchContended(b, testenv.MySQL(b).URL, sqltest.Strategies("getlock"))
}
