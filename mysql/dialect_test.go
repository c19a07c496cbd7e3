package mysql

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/sqllock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
)

// FuzzTimeouts: every duration the dialect sends to the server (the
// session's wait_timeout from the TTL, innodb_lock_wait_timeout and
// GET_LOCK's timeout from the wait) never wraps and stays within the
// server's range; wait_timeout and innodb_lock_wait_timeout are never
// shorter than asked (so a lease is never cut short), and for a TTL in the
// declared range nothing is clamped; GET_LOCK's timeout is never shorter
// than sqllock.ServerWait, and ends a wait longer than the margin before
// its deadline (the context's deadline, reached first, would cost the
// connection). (The version expiry, a DATETIME(6), must stay below the
// year 10000.)
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
		server := time.Duration(gl * 1e9)
		if gl <= 0 || gl > maxWaitTimeout || ttl > 0 && gl < maxWaitTimeout &&
			(server < sqllock.ServerWait(sqllock.Req{Wait: ttl}, time.Millisecond)-time.Microsecond || ttl > sqllock.WaitMargin+time.Millisecond && server >= ttl) {
			t.Fatalf("GET_LOCK timeout for %v: %v", ttl, gl)
		}
	})
}

// TestKeySpaces: a lock's GET_LOCK key is never a semaphore slot's key
// nor a session's marker, in any case (some servers compare the names
// case-insensitively): a name that starts with "dlock#" in any case is
// hashed to "dlock#" and 58 hex digits, and a semaphore's key has an 's'
// where those have a hex digit.
func TestKeySpaces(t *testing.T) {
	t.Parallel()
	sem := semKey(semBase(sqllock.Table{Raw: "t"}, "x"), 3)
	if len(sem) != 64 || sem[:7] != "dlock#s" {
		t.Fatalf("semaphore key %q: want dlock#s and 57 hex digits", sem)
	}
	for _, name := range []string{sem, strings.ToUpper(sem), "DLOCK#" + sem[6:], "dLoCk#" + sem[6:], "Dlock#conn#0123", "dlock#", "DLOCK#"} {
		k := lockKey(name)
		if k == name || len(k) != 64 || k[:6] != "dlock#" || strings.Trim(k[6:], "0123456789abcdef") != "" {
			t.Errorf("lock %q has key %q: want it hashed to dlock# and 58 hex digits", name, k)
		}
	}
	for _, name := range []string{"dlock", "xdlock#s", "orders/42", "dlöck#s"} {
		if k := lockKey(name); k != name {
			t.Errorf("lock %q has key %q: want the name itself", name, k)
		}
	}
}
