package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// FenceField is the field of a fenced hash that keeps the last token
// applied to it. FencedSet and FencedIncrBy refuse to write it as data.
const FenceField = "dlock:fence"

//go:embed fenced.lua
var fencedLua string

var fencedScript = goredis.NewScript(fencedLua)

// Scripter runs Lua scripts: *goredis.Client, *goredis.ClusterClient,
// goredis.UniversalClient and a pipeline are Scripters.
type Scripter = goredis.Scripter

// FencedSet is the resource side of fencing for data of your own in Redis:
// it sets field of the hash key to value only if token is not older than
// the last token applied to key, and records token, in one script (so
// atomically, and on one Cluster slot: everything lives in key), and
// reports whether it wrote, as the SQL drivers' FencedUpdate does. A holder
// whose lease ended while it was paused carries an older token than the
// next holder's, and its write is refused (false, nil); the current holder
// may write again (its token equals the recorded one).
//
// The fencing token is the lease's: pass lease.Token(). It is not compared
// with the lock's own keys, so the resource may live on another Redis
// server than the lock. Read the data with HGET key field.
func FencedSet(ctx context.Context, c Scripter, key string, token uint64, field, value string) (bool, error) {
	_, ok, err := fenced(ctx, c, key, token, "set", field, value)
	return ok, err
}

// FencedIncrBy is FencedSet for a counter: it adds delta to the integer
// field of the hash key (HINCRBY) only if token is not older than the last
// token applied to key, and returns the new value and whether it wrote.
// A stock deduction is
// FencedIncrBy(ctx, rdb, "stock:sku-1", lease.Token(), "qty", -1).
func FencedIncrBy(ctx context.Context, c Scripter, key string, token uint64, field string, delta int64) (int64, bool, error) {
	res, ok, err := fenced(ctx, c, key, token, "incr", field, strconv.FormatInt(delta, 10))
	if err != nil || !ok {
		return 0, false, err
	}
	n, isInt := res.(int64)
	if !isInt {
		return 0, false, fmt.Errorf("redis: fenced write to %q: unexpected reply %v", key, res)
	}
	return n, true, nil
}

// fenced runs fenced.lua; ok is false when a newer token was applied.
func fenced(ctx context.Context, c Scripter, key string, token uint64, op, field, value string) (res any, ok bool, err error) {
	switch {
	case c == nil:
		return nil, false, errors.New("redis: fenced write: nil client")
	case token == 0:
		return nil, false, fmt.Errorf("redis: fenced write to %q: token 0 is not a fencing token", key)
	case key == "":
		return nil, false, errors.New("redis: fenced write: empty key")
	case field == FenceField:
		return nil, false, fmt.Errorf("redis: fenced write to %q: field %q keeps the fence", key, FenceField)
	}
	r, err := fencedScript.Run(ctx, c, []string{key}, FenceField, strconv.FormatUint(token, 10), op, field, value).Slice()
	if err != nil {
		return nil, false, fmt.Errorf("redis: fenced write to %q: %w", key, err)
	}
	if len(r) != 2 {
		return nil, false, fmt.Errorf("redis: fenced write to %q: unexpected reply %v", key, r)
	}
	applied, _ := r[0].(int64)
	return r[1], applied == 1, nil
}
