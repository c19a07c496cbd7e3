package redis

import (
	_ "embed"
	"math"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/layout"
)

// The scripts run with EVALSHA; goredis.Script.Run falls back to EVAL when
// the server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed refresh.lua
	refreshLua string
	//go:embed release.lua
	releaseLua string
	//go:embed inspect.lua
	inspectLua string

	acquireScript = goredis.NewScript(acquireLua)
	refreshScript = goredis.NewScript(refreshLua)
	releaseScript = goredis.NewScript(releaseLua)
	inspectScript = goredis.NewScript(inspectLua)
)

// keys are the Redis keys and channels of one lock name, as layout.Redis
// describes them: the layout is written once, in internal/layout, which
// the test hooks that reach behind a holder's back use too.
type keys struct{ lock, fence, queue, channel string }

func keysFor(prefix, name string) keys {
	k := layout.RedisKeys(prefix, name)
	return keys{lock: k.Lock, fence: k.Fence, queue: k.Queue, channel: k.Channel}
}

// Waiter registration: a TryAcquire that fails while its Locker has waiters
// on the name registers the Locker in the name's queue for regLifetime; a
// release wakes the wakeCount Lockers registered longest ago. A waiter
// retries at least every second (the portable layer's longest wait with a
// Watcher), renewing the registration, so 3s keeps a live waiter
// registered and forgets a crashed one soon. Two are woken, not one, so
// that a registration whose waiters just left does not cost the others a
// wake-up.
const (
	regLifetime = 3 * time.Second
	wakeCount   = 2
)

// registration is what acquire.lua needs to (un)register the caller's
// Locker: its id when it has waiters on the name, and whether the caller
// is the last of them.
type registration struct {
	id   string
	last bool
}

// MaxTTL is the longest lease the driver accepts: the largest whole number
// of milliseconds a time.Duration holds (about 292 years). SET PX and
// PEXPIRE take a positive 64-bit millisecond count that the server adds to
// its clock (Redis 7 refuses a sum past 2^63-1 ms, older servers would
// wrap), so every TTL up to MaxTTL is honoured with room to spare; and a
// PTTL the server reports for a lease of at most MaxTTL converts back to a
// Duration without overflow.
const MaxTTL = time.Duration(maxMillis) * time.Millisecond

// maxMillis is the largest whole number of milliseconds in a Duration.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// millis converts a TTL to whole milliseconds, rounding up (1.5ms is 2ms,
// never 1ms): the server must not expire a lease before the local
// deadline, which is computed from the unrounded TTL. It cannot overflow:
// it divides first and adds at most one, so a TTL of up to
// math.MaxInt64ns gives at most maxMillis+1.
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// fromMillis converts a millisecond count read from the server (a PTTL) to
// a Duration: 0 for none or a negative count (no key, no expiry),
// saturating at the largest Duration instead of wrapping.
func fromMillis(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms > maxMillis:
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// ownerValue is what the lock key holds: a random id unique to the grant
// (it makes release and refresh safe), then "|" and the Request.Owner, for
// Inspect.
func ownerValue(id, owner string) string { return id + "|" + owner }

// ownerOf returns the Request.Owner part of a stored owner value.
func ownerOf(value string) string {
	_, owner, _ := strings.Cut(value, "|")
	return owner
}

// acquireReply decodes acquire.lua's {granted, token or pttl}.
func acquireReply(v []any) (granted bool, n int64, ok bool) {
	if len(v) != 2 {
		return false, 0, false
	}
	flag, ok1 := v[0].(int64)
	n, ok2 := v[1].(int64)
	return flag == 1, n, ok1 && ok2
}

// inspectReply decodes inspect.lua's {value, pttl, fence}.
func inspectReply(v []any) (value string, held bool, pttl int64, fence uint64) {
	if len(v) != 3 {
		return "", false, 0, 0
	}
	value, held = v[0].(string)
	pttl, _ = v[1].(int64)
	if s, ok := v[2].(string); ok {
		fence, _ = strconv.ParseUint(s, 10, 64)
	}
	return value, held, pttl, fence
}
