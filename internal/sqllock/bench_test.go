package sqllock_test

import (
	"testing"

	_ "github.com/dlock-go/dlock/mysql"
	_ "github.com/dlock-go/dlock/postgres"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// sqlServers are the two SQL backends with their native strategy's name.
var sqlServers = []struct {
	name, native string
	server       func(testing.TB) *testenv.Server
}{
	{"postgres", "advisory", testenv.Postgres},
	{"mysql", "getlock", testenv.MySQL},
}

// BenchmarkUncontended: Acquire+Release of a free lock per backend and
// strategy ÷ the hand-written floor of that strategy, which gives its
// guarantees, fencing token and idle timeout included (internal/floor:
// BEGIN; SELECT … FOR UPDATE NOWAIT, a durable token on a second
// connection / COMMIT for forupdate, a lease row's conditional UPDATEs
// returning its version for version, pg_try_advisory_lock + nextval /
// pg_advisory_unlock and GET_LOCK(k, 0) + a counter / RELEASE_LOCK for
// the native locks); medians of one run (target ratio <= 1.3).
func BenchmarkUncontended(b *testing.B) {
	for _, s := range sqlServers {
		b.Run(s.name, func(b *testing.B) {
			sqltest.BenchUncontended(b, s.server(b).URL, sqltest.Strategies(s.native))
		})
	}
}

// BenchmarkContended: 8 workers, hold 1ms, 2ms between; grants/s ÷
// 1/(hold + one round trip) (targets: forupdate and the native locks >=
// 0.9; PostgreSQL's version >= 0.8; MySQL's version polls and has no
// target).
func BenchmarkContended(b *testing.B) {
	for _, s := range sqlServers {
		b.Run(s.name, func(b *testing.B) {
			sqltest.BenchContended(b, s.server(b).URL, sqltest.Strategies(s.native))
		})
	}
}
