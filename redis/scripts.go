package redis

import (
	"context"
	_ "embed"
	"math"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/layout"
)

// The scripts run with EVALSHA (script.run); they fall back to EVAL when
// the server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed take.lua
	takeLua string
	//go:embed refresh.lua
	refreshLua string
	//go:embed release.lua
	releaseLua string
	//go:embed inspect.lua
	inspectLua string
	//go:embed grant.lua
	grantLua string
	//go:embed wait.lua
	waitLua string
	//go:embed handover.lua
	handoverLua string
	//go:embed cancel.lua
	cancelLua string
	//go:embed wake.lua
	wakeLua string
	//go:embed pass.lua
	passLua string

	// The attempt scripts start with take.lua's take.
	takeScript    = newScript(keysHeader() + takeLua + "return reply(take())\n")
	acquireScript = newScript(keysHeader() + takeLua + acquireLua)
	refreshScript = newScript(refreshLua)
	// The scripts that wake Redlock waiters (and semaphore waiters)
	// start with wake.lua's wakeNext.
	releaseScript = newScript(keysHeader() + wakeLua + releaseLua)
	passScript    = newScript(wakeLua + passLua)
	inspectScript = goredis.NewScript(inspectLua)

	// The FIFO grant queue of a single server or a Cluster (Redlock keeps
	// its attempt scripts and release.lua; a TryAcquire takes with
	// take.lua's script everywhere), in a variant per publish command.
	publishScripts  = newQueueScripts("PUBLISH")
	spublishScripts = newQueueScripts("SPUBLISH")
)

// queueScripts are the FIFO grant queue's scripts for one publish command.
// Each starts with queueHeader's constants and grant.lua's grantNext, and
// takes one key, the lock key: what the queue's scripts used to take as
// keys and arguments besides it (the fence, queue and entry keys, the
// publish command, a queue entry's life) is derived or constant, and each
// key or argument parsed and copied into a script's tables cost the
// server time on every acquire and release.
type queueScripts struct{ wait, handover, cancel *script }

func newQueueScripts(pub string) *queueScripts {
	h := queueHeader(pub) + grantLua
	return &queueScripts{wait: newScript(h + waitLua), handover: newScript(h + handoverLua), cancel: newScript(h + cancelLua)}
}

// queueScriptsFor returns the scripts that publish with pubCmd
// (publishCommand's).
func queueScriptsFor(pubCmd any) *queueScripts {
	if pubCmd == "SPUBLISH" {
		return spublishScripts
	}
	return publishScripts
}

// queueHeader declares the constants of the queue's scripts: the publish
// command, a queue entry's life in milliseconds, and the suffixes that
// make a name's fence, queue and entry keys from its lock key, taken from
// internal/layout (each key is the lock key and a suffix, so it carries
// the lock key's hash tag: a Cluster finds it in the slot of the key the
// script declares).
func queueHeader(pub string) string {
	k := layout.RedisKeys("", "x")
	return "local PUB, ENTRY_LIFE = '" + pub + "', " + strconv.FormatInt(millis(waitEntryLife), 10) + "\n" +
		"local FENCE, QUEUE, DATA = " + keySuffix(k, k.Fence) + ", " + keySuffix(k, k.Waiters) + ", " + keySuffix(k, k.WaiterData) + "\n"
}

// keysHeader declares what the attempt scripts and release.lua derive from the lock
// key, as queueHeader does for the queue's scripts: the suffixes of the
// fence counter, Redlock's waiter registry and its release channel
// prefix, and how many registered Lockers a Redlock release wakes.
func keysHeader() string {
	k := layout.RedisKeys("", "x")
	return "local FENCE, REGISTRY, RELEASE, REDLOCK_WAKE = " + keySuffix(k, k.Fence) + ", " + keySuffix(k, k.Queue) + ", " +
		keySuffix(k, k.Channel) + ", " + strconv.Itoa(redlockWake) + "\n"
}

// keySuffix is key's suffix after the lock key of k, quoted for Lua.
func keySuffix(k layout.Redis, key string) string {
	return strconv.Quote(strings.TrimPrefix(key, k.Lock))
}

// script is a Lua script run by EVALSHA through Do, on an argument list
// the caller prepared: a lease keeps the list of its acquire and release
// (and the boxed keys and values in it), so that the driver's hot path
// allocates no argument slices of its own. goredis.Script.Run, which does
// the same EVALSHA-then-EVAL, copies its keys and arguments into a new
// list, boxing each, on every call.
type script struct {
	src string
	sha any // the hex SHA-1 digest of src, boxed once
}

func newScript(src string) *script { return &script{src: src, sha: goredis.NewScript(src).Hash()} }

// args starts an argument list in dst (whose capacity should hold the
// whole list): EVALSHA, the digest and numkeys (a decimal string).
func (s *script) args(dst []any, numkeys string) []any {
	return append(dst[:0], "evalsha", s.sha, numkeys)
}

// doer is what runs a command: *goredis.Client, *goredis.ClusterClient,
// goredis.UniversalClient.
type doer interface {
	Process(ctx context.Context, cmd goredis.Cmder) error
}

// do runs one command on c, as c.Do would, but with the command's key step
// count set. go-redis's ClusterClient looks a command's step count up in
// its COMMAND INFO cache on every call where it is unset (0, which is
// EVALSHA's own), and with ContextTimeoutEnabled each lookup makes a
// context with a 5 s timer of its own: a timer made and stopped per
// command, on a path that makes none. The count steers only the split of
// a multi-shard command (a policy that EVAL and EVALSHA never have), where
// 1 is go-redis's default.
func do(ctx context.Context, c doer, args []any) *goredis.Cmd {
	cmd := goredis.NewCmd(ctx, args...)
	cmd.SetStepCount(1)
	_ = c.Process(ctx, cmd)
	return cmd
}

// run runs the list made by s.args, then the keys and arguments: EVALSHA,
// and EVAL of the source when the server does not know the digest (it
// caches the script again). args is only read, so that Redlock's nodes
// may share one list.
func (s *script) run(ctx context.Context, c doer, args []any) *goredis.Cmd {
	cmd := do(ctx, c, args)
	if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", s.src
		cmd = do(ctx, c, eval)
	}
	return cmd
}

// Argument lists of the scripts, which the driver keeps in its leases.
const (
	acquireArgc  = 9 // evalsha, digest, numkeys, 1 key, 5 arguments (take.lua's script: 2 arguments)
	releaseArgc  = 6 // evalsha, digest, numkeys, 1 key, 2 arguments
	refreshArgc  = 6 // evalsha, digest, numkeys, 1 key, 2 arguments
	waitArgc     = 7 // evalsha, digest, numkeys, 1 key, 3 arguments
	handoverArgc = 5 // evalsha, digest, numkeys, 1 key, 1 argument (cancel.lua too)
	passArgc     = 8 // evalsha, digest, numkeys, 2 keys, 3 arguments
)

// The grant queue's timings: a waiter renews its entry every
// renewEvery(ttl), at most every second, and an entry lasts waitEntryLife
// unless renewed, so that a dead waiter's entry is skipped (and the queue
// keys vanish) within seconds.
const waitEntryLife = 3 * time.Second

// renewEvery is how often a waiter renews its queue entry (which also
// takes a grant whose message was lost, and a lock whose holder expired
// without a release): a quarter of the TTL, between 10ms and 1s. A grant
// that reaches a waiter by a message is then at most a quarter of the TTL
// after the waiter's last renewal, from whose start its lease is counted.
func renewEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 10*time.Millisecond), time.Second)
}

// keys are the Redis keys and channels of one lock name, as layout.Redis
// describes them: the layout is written once, in internal/layout, which
// the test hooks that reach behind a holder's back use too.
type keys struct{ lock, fence, queue, channel, waiters, waiterData string }

func keysFor(prefix, name string) keys {
	k := layout.RedisKeys(prefix, name)
	return keys{lock: k.Lock, fence: k.Fence, queue: k.Queue, channel: k.Channel, waiters: k.Waiters, waiterData: k.WaiterData}
}

// Waiter registration (Redlock, semaphores): a TryAcquire that fails
// while its Locker has waiters on the name registers the Locker in the
// name's queue for regLifetime. A waiter retries at least every second
// (the portable layer's longest wait with a Watcher), renewing the
// registration, so 3s keeps a live waiter registered and forgets a
// crashed one soon.
//
// A Redlock release wakes the one Locker registered longest ago
// (redlockWake): a second woken Locker would only race the first for the
// nodes' votes, and lose (a failed attempt on every node, and its
// take-back), or split them so that neither wins. A woken Locker whose
// waiters all left passes the wake-up on (pass.lua), so that the release
// is not lost on it. A semaphore's release wakes semWake Lockers: a
// permit freed while others are may serve a second one.
const (
	regLifetime = 3 * time.Second
	redlockWake = 1
	semWake     = 2
)

// The constant arguments, boxed once.
var (
	regLifetimeArg any = millis(regLifetime)
	semWakeArg     any = semWake
)

// registration is what acquire.lua needs to (un)register the caller's
// Locker: its id (boxed) when it has waiters on the name, nil otherwise,
// and whether the caller is the last of them.
type registration struct {
	id   any
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

// ownerOf returns the Request.Owner part of a stored owner value.
func ownerOf(value string) string {
	_, owner, _ := strings.Cut(value, "|")
	return owner
}

// acquireReply decodes acquire.lua's reply: the token (an integer) when
// granted, {pttl} when refused.
func acquireReply(v any) (granted bool, n int64, ok bool) {
	switch v := v.(type) {
	case int64:
		return true, v, true
	case []any:
		if len(v) == 1 {
			n, ok = v[0].(int64)
			return false, n, ok
		}
	}
	return false, 0, false
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
