package zookeeper

import (
	"fmt"
	"math"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// MaxSessionTimeout is the longest session timeout ZooKeeper's protocol can
// carry: the connect request and response hold it as an int32 of
// milliseconds (about 596h31m). go-zookeeper converts the requested
// duration with a plain int32(d/time.Millisecond), so a longer one would
// wrap to a negative timeout (no session is ever established) or to an
// unrelated short one; it is refused instead. The server clamps whatever
// it is asked for to its [minSessionTimeout, maxSessionTimeout] (by default
// [2, 20] × tickTime) and the Locker uses only that negotiated value.
const MaxSessionTimeout = math.MaxInt32 * time.Millisecond

// millis converts d to ZooKeeper's int32 milliseconds, rounding up (a
// positive duration never becomes 0). It reports false for a duration that
// is not positive or above MaxSessionTimeout: no value is ever truncated or
// wrapped.
func millis(d time.Duration) (int32, bool) {
	if d <= 0 || d > MaxSessionTimeout {
		return 0, false
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond // d ≤ MaxInt32 ms: no overflow
	return int32(ms), true
}

// fromMillis is the inverse of millis for a value read from the wire: a
// non-positive one (a malformed or hostile reply) is 0, "unknown".
func fromMillis(ms int32) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond // at most MaxSessionTimeout: no overflow
}

// checkSessionTimeout refuses a session timeout that go-zookeeper cannot
// send without wrapping; zero (unknown, for OpenLocker) is allowed. The
// error wraps ErrInvalidOption and has no package prefix (callers add it).
func checkSessionTimeout(d time.Duration) error {
	if d == 0 {
		return nil
	}
	if _, ok := millis(d); !ok {
		return fmt.Errorf("session timeout %v is outside (0, %v], the range of ZooKeeper's int32 milliseconds: %w", d, MaxSessionTimeout, driver.ErrInvalidOption)
	}
	return nil
}
