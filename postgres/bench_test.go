package postgres_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// BenchmarkUncontended: Acquire+Release of a free lock per strategy ÷
// the hand-written floor of that strategy on one connection
// (internal/floor: BEGIN; SELECT … FOR UPDATE / COMMIT for forupdate, a
// lease row's conditional UPDATEs for version, pg_try_advisory_lock /
// pg_advisory_unlock for advisory); medians of one run (target ratio <=
// 1.3).
func BenchmarkUncontended(b *testing.B) {
	sqltest.BenchUncontended(b, testenv.Postgres(b).URL, sqltest.Strategies("advisory"))
}

// BenchmarkContended: 8 workers, hold 1ms, 2ms between; grants/s ÷
// 1/(hold + one round trip) (targets: forupdate, advisory >= 0.9;
// version >= 0.8).
func BenchmarkContended(b *testing.B) {
	sqltest.BenchContended(b, testenv.Postgres(b).URL, sqltest.Strategies("advisory"))
}
