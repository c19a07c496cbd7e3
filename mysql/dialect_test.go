package mysql

import (
	"math"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// FuzzTimeouts: every duration the dialect sends to the server (the
// session's wait_timeout from the TTL, innodb_lock_wait_timeout and
// GET_LOCK's timeout from the wait) is never shorter than asked (so a
// lease is never cut short), never wraps, and stays within the server's
// range; for a TTL in the declared range nothing is clamped.
func FuzzTimeouts(f *testing.F) {
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second, math.MaxInt64 - 1, 0, 1, -1, math.MinInt64,
		time.Second - 1, time.Second, time.Second + 1, maxPinnedTTL, maxPinnedTTL + 1, maxVersionTTL, maxVersionTTL + 1} {
		f.Add(int64(d))
	}
	d := &dialect{}
	f.Fuzz(func(t *testing.T, n int64) {
		ttl := time.Duration(n)
		wt := waitTimeout(ttl)
		if wt < 1 || wt > maxWaitTimeout {
			t.Fatalf("wait_timeout for %v: %d", ttl, wt)
		}
		if lo, hi := d.TTLRange(sqllock.ForUpdate); ttl >= lo && ttl <= hi && time.Duration(wt)*time.Second < ttl {
			t.Fatalf("wait_timeout for an in-range TTL %v: %ds, shorter", ttl, wt)
		}
		lw := lockWait(sqllock.Req{Wait: ttl})
		if lw < 1 || lw > maxLockWait || ttl > 0 && lw < maxLockWait && time.Duration(lw)*time.Second < ttl {
			t.Fatalf("innodb_lock_wait_timeout for %v: %d", ttl, lw)
		}
		gl := getLockTimeout(sqllock.Req{Wait: ttl})
		if gl <= 0 || gl > maxWaitTimeout || ttl > 0 && gl < maxWaitTimeout && time.Duration(gl*1e9) < ttl-time.Microsecond {
			t.Fatalf("GET_LOCK timeout for %v: %v", ttl, gl)
		}
		if lo, hi := d.TTLRange(sqllock.Version); ttl >= lo && ttl <= hi {
			// The expiry is the server's now plus the TTL in whole
			// microseconds: a DATETIME(6) below the year 10000 for decades.
			us := sqllock.Micros(ttl)
			if time.Duration(us)*time.Microsecond < ttl || time.Now().Add(time.Duration(us)*time.Microsecond).Year() > 2200 {
				t.Fatalf("version expiry for %v: %dµs", ttl, us)
			}
		}
	})
}
