package mysql

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/sqllock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
)

// FuzzTimeouts: every duration the dialect sends to the server (the
// session's wait_timeout from the TTL, innodb_lock_wait_timeout and
// GET_LOCK's timeout from the wait) is never shorter than asked (so a
// lease is never cut short), never wraps, and stays within the server's
// range; for a TTL in the declared range nothing is clamped. (The
// version expiry, a DATETIME(6), must stay below the year 10000.)
func FuzzTimeouts(f *testing.F) {
	d := dialect{}
	sqltest.FuzzTimeouts(f, d, time.Second, []time.Duration{maxPinnedTTL, maxVersionTTL}, func(t *testing.T, ttl time.Duration) {
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
	})
}
