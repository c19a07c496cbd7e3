package floor

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// delIfOwner is the Redis floors' compare-and-delete.
//
// KEYS[1]: the lock's key. ARGV[1]: the holder's value.
// Returns 1 when it deleted the key, 0 when the key was not the holder's.
var delIfOwner = goredis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// setFenced is the fenced Redis floor's take: SET NX PX and, when it set
// the key, INCR of the name's counter, in one round trip.
//
// KEYS[1]: the lock's key, KEYS[2]: the name's counter. ARGV[1]: the
// holder's value, ARGV[2]: the TTL in milliseconds.
// Returns the token (the counter after INCR), or 0 when the key is held.
var setFenced = goredis.NewScript(`if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return redis.call("incr", KEYS[2]) end return 0`)

// redisConn opens a go-redis client of one connection.
func redisConn(rawURL string) (*goredis.Client, error) {
	opt, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("floor: redis: bad URL") // the error may quote the URL
	}
	opt.PoolSize, opt.MinIdleConns = 1, 1
	opt.DisableIdentity = true // no CLIENT SETINFO on connect
	return goredis.NewClient(opt), nil
}

// fencePrefix names the counter of a lock's key: a prefix no lock key
// has (they all start with keyPrefix).
const fencePrefix = "fence:"

// openRedis is the fenced floor: setFenced takes the lock and its token
// (one EVALSHA), delIfOwner frees it.
func openRedis(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error) {
	ms := strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)
	return openRedisFloor(ctx, rawURL, []*goredis.Script{setFenced, delIfOwner},
		func(ctx context.Context, c *goredis.Client, key, val string) (uint64, bool, error) {
			n, err := setFenced.Run(ctx, c, []string{key, fencePrefix + key}, val, ms).Uint64()
			return n, n > 0, err
		})
}

// openRedisUnfenced is the floor the Redis peers are built on: SET NX PX
// to take, delIfOwner to free, no token.
func openRedisUnfenced(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error) {
	return openRedisFloor(ctx, rawURL, []*goredis.Script{delIfOwner},
		func(ctx context.Context, c *goredis.Client, key, val string) (uint64, bool, error) {
			ok, err := c.SetNX(ctx, key, val, ttl).Result()
			return 0, ok, err
		})
}

// openRedisFloor opens a Redis floor whose attempt is take, with a value
// unique to this holder and attempt, freed by delIfOwner so that a holder
// whose lease expired cannot free its successor's. The scripts are loaded
// first: the floor's round trips are EVALSHA, never EVAL.
func openRedisFloor(ctx context.Context, rawURL string, scripts []*goredis.Script,
	take func(ctx context.Context, c *goredis.Client, key, val string) (token uint64, ok bool, err error)) (*Lock, error) {
	c, err := redisConn(rawURL)
	if err != nil {
		return nil, err
	}
	for _, s := range scripts {
		if err := s.Load(ctx, c).Err(); err != nil {
			c.Close()
			return nil, fmt.Errorf("floor: redis: script load: %w", err)
		}
	}
	// A value unique among clients: this client's random prefix and a
	// sequence number (cheaper than a random value per attempt).
	owner, seq := rand.Text(), uint64(0)
	return &Lock{
		try: func(ctx context.Context, name string) (*Grant, bool, error) {
			seq++
			key, val := keyPrefix+name, owner+strconv.FormatUint(seq, 36)
			token, ok, err := take(ctx, c, key, val)
			if err != nil || !ok {
				return nil, false, err
			}
			return &Grant{token: token, release: func(ctx context.Context) error {
				n, err := delIfOwner.Run(ctx, c, []string{key}, val).Int()
				if err == nil && n != 1 {
					err = ErrNotHeld
				}
				return err
			}}, true, nil
		},
		close: c.Close,
	}, nil
}

func redisRTT(ctx context.Context, rawURL string) (*RTT, error) {
	c, err := redisConn(rawURL)
	if err != nil {
		return nil, err
	}
	return &RTT{do: func(ctx context.Context) error { return c.Ping(ctx).Err() }, close: c.Close}, nil
}
