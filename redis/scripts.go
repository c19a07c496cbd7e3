package redis

import (
	_ "embed"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
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

// keys are the Redis keys and channels of one lock name. The name sits in
// a hash tag, so that in a Redis Cluster all of them hash to one slot,
// which the scripts need (they touch them together).
type keys struct {
	lock    string // <prefix>{<name>}: the owner value, with the lease's PX
	fence   string // <prefix>{<name>}:fence: the INCR fencing counter, never expires
	queue   string // <prefix>{<name>}:q: Lockers with waiters, by registration expiry
	channel string // <prefix>{<name>}:rel: Locker L is woken on <channel>:L
}

func keysFor(prefix, name string) keys {
	lock := prefix + "{" + escapeTag(name) + "}"
	return keys{lock: lock, fence: lock + ":fence", queue: lock + ":q", channel: lock + ":rel"}
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

// escapeTag makes a name safe inside a hash tag. A hash tag ends at the
// first '}', so a '}' in the name would end it early (and a name starting
// with '}' would make the tag empty, scattering the keys over slots). '}'
// becomes %7D and '%' becomes %25, which keeps the mapping one-to-one. Names
// without either character are used as they are.
func escapeTag(name string) string {
	if !strings.ContainsAny(name, "}%") {
		return name
	}
	return strings.NewReplacer("%", "%25", "}", "%7D").Replace(name)
}

// millis converts a TTL to whole milliseconds, rounding up: the server must
// not expire a lease before the local deadline, which is computed from the
// unrounded TTL.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
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
