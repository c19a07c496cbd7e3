package postgres

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/sqllock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
)

// FuzzTimeouts: every duration the dialect sends to the server (the idle
// timeouts from the TTL, lock_timeout from the wait: int32 milliseconds)
// never wraps and stays within the server's range; an idle timeout is
// never shorter than asked, and for a TTL in the declared range nothing is
// clamped; lock_timeout is never shorter than sqllock.ServerWait, and ends
// a wait longer than the margin before its deadline (the context's
// deadline, reached first, would cost the connection).
func FuzzTimeouts(f *testing.F) {
	d := dialect{}
	sqltest.FuzzTimeouts(f, d, time.Millisecond, []time.Duration{maxPinnedTTL, maxVersionTTL}, func(t *testing.T, ttl time.Duration) {
		ms := timeoutMS(ttl)
		if ms < 1 || ms > math.MaxInt32 {
			t.Fatalf("timeout for %v: %dms", ttl, ms)
		}
		for _, s := range []sqllock.Strategy{sqllock.ForUpdate, sqllock.Native} {
			if lo, hi := d.TTLRange(s); ttl >= lo && ttl <= hi && time.Duration(ms)*time.Millisecond < ttl {
				t.Fatalf("%s: idle timeout for an in-range TTL %v: %dms, shorter", s, ttl, ms)
			}
		}
		lt, err := strconv.ParseInt(lockTimeout(sqllock.Req{Wait: ttl}), 10, 64)
		server := time.Duration(lt) * time.Millisecond
		if err != nil || lt < 0 || lt > math.MaxInt32 || ttl > 0 && (lt == 0 || lt < math.MaxInt32 &&
			(server < sqllock.ServerWait(sqllock.Req{Wait: ttl}, time.Millisecond) || ttl > sqllock.WaitMargin+time.Millisecond && server >= ttl)) {
			t.Fatalf("lock_timeout for %v: %d %v", ttl, lt, err)
		}
	})
}
