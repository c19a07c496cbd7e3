package dlock

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
)

// DefaultTTL is the lease length when AcquireOptions.TTL is zero.
const DefaultTTL = 30 * time.Second

// MinTTL is the shortest lease length any backend accepts. A lease's local
// deadline is its TTL minus a drift margin (1% + 2ms, see Lease.Done); at
// 5ms more than half the TTL is left as validity, while a TTL of 1–2ms would
// leave a lease lost at birth. A backend may declare a larger minimum
// (Capabilities.MinTTL).
const MinTTL = 5 * time.Millisecond

// MaxNameLen is the longest lock name, in bytes, that any backend accepts.
// A backend may declare a smaller limit in its Capabilities.
const MaxNameLen = 1024

// AcquireOptions tunes one acquisition. A nil *AcquireOptions, and every
// zero field, means the default.
type AcquireOptions struct {
	// TTL is the lease length: if the holder neither refreshes nor releases
	// it, the backend frees the lock TTL after the grant. Zero means
	// DefaultTTL (30s). A TTL outside the backend's declared range
	// (Capabilities.MinTTL, at least MinTTL, to Capabilities.MaxTTL) is an
	// error wrapping ErrInvalidOption, returned before any server call.
	// Session-bound backends (ZooKeeper, SQL connection locks) bound the
	// lease by their session instead; see Capabilities.SessionBound.
	TTL time.Duration

	// NoKeepAlive turns off the automatic refresh. By default a Lease is
	// refreshed every TTL/3 (like Redisson's watchdog) for as long as it is
	// held, and Done is closed if refreshing fails long enough for the lease
	// to have possibly expired.
	NoKeepAlive bool

	// Owner, when non-empty, makes the lock reentrant for that owner on this
	// Locker: a second Acquire by the same Owner returns at once and
	// increments a hold count; the lock is freed by the last Release. It is
	// also recorded on backends that can report a lock's holder.
	Owner string
}

func (o *AcquireOptions) ttl() time.Duration {
	if o == nil || o.TTL == 0 {
		return DefaultTTL
	}
	return o.TTL
}

func (o *AcquireOptions) owner() string {
	if o == nil {
		return ""
	}
	return o.Owner
}

func (o *AcquireOptions) keepAlive() bool { return o == nil || !o.NoKeepAlive }

func (o *AcquireOptions) validate() error {
	if o == nil {
		return nil
	}
	if o.TTL < 0 {
		return fmt.Errorf("%w: negative TTL %v", ErrInvalidOption, o.TTL)
	}
	if len(o.Owner) > MaxNameLen || !utf8.ValidString(o.Owner) {
		return fmt.Errorf("%w: owner must be valid UTF-8 of at most %d bytes", ErrInvalidOption, MaxNameLen)
	}
	return nil
}

// ttlRange is the range of TTLs this Locker accepts: the backend's declared
// range, never below the portable MinTTL. A zero max means no limit.
func (l *Locker) ttlRange() (lo, hi time.Duration) {
	return max(l.caps.MinTTL, MinTTL), l.caps.MaxTTL
}

// validateTTL refuses a TTL the backend cannot honour, naming the range.
func (l *Locker) validateTTL(ttl time.Duration) error {
	lo, hi := l.ttlRange()
	if ttl >= lo && (hi == 0 || ttl <= hi) {
		return nil
	}
	if hi == 0 {
		return fmt.Errorf("%w: TTL %v is below the minimum of %v", ErrInvalidOption, ttl, lo)
	}
	return fmt.Errorf("%w: TTL %v is outside %s's range of %v to %v", ErrInvalidOption, ttl, l.caps.Backend, lo, hi)
}

// validateName applies the portable rules and the driver's own.
func (l *Locker) validateName(name string) error {
	max := MaxNameLen
	if m := l.caps.MaxNameLen; m > 0 && m < max {
		max = m
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, name)
	case len(name) > max:
		return fmt.Errorf("%w: name of %d bytes exceeds the limit of %d bytes", ErrInvalidName, len(name), max)
	}
	if v, ok := l.drv.(driver.NameValidator); ok {
		if err := v.ValidateName(name); err != nil {
			return err
		}
	}
	return nil
}

// drift is the safety margin subtracted from a lease's TTL when the local
// deadline is computed: 1% of the TTL plus 2ms, as in Redlock, for clock
// rate differences and the time a release takes to reach the server.
func drift(ttl time.Duration) time.Duration { return driver.Drift(ttl) }
