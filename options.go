package dlock

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
)

// DefaultTTL is the lease length when AcquireOptions.TTL is zero.
const DefaultTTL = 30 * time.Second

// MinTTL is the shortest lease length accepted.
const MinTTL = time.Millisecond

// MaxNameLen is the longest lock name, in bytes, that any backend accepts.
// A backend may declare a smaller limit in its Capabilities.
const MaxNameLen = 1024

// AcquireOptions tunes one acquisition. A nil *AcquireOptions, and every
// zero field, means the default.
type AcquireOptions struct {
	// TTL is the lease length: if the holder neither refreshes nor releases
	// it, the backend frees the lock TTL after the grant. Zero means
	// DefaultTTL (30s); a negative TTL or one below MinTTL (1ms) is an error.
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
	if o.TTL != 0 && o.TTL < MinTTL {
		return fmt.Errorf("%w: TTL %v is below the minimum of %v", ErrInvalidOption, o.TTL, MinTTL)
	}
	if len(o.Owner) > MaxNameLen || !utf8.ValidString(o.Owner) {
		return fmt.Errorf("%w: owner must be valid UTF-8 of at most %d bytes", ErrInvalidOption, MaxNameLen)
	}
	return nil
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
