package floor

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
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

// redisConn opens a go-redis client of one connection (per node of a
// Cluster, for a redis+cluster:// URL).
func redisConn(rawURL string) (goredis.UniversalClient, error) {
	if scheme, rest, _ := strings.Cut(rawURL, "://"); strings.EqualFold(scheme, "redis+cluster") {
		u, err := parseURL("redis://" + rest)
		if err != nil {
			return nil, fmt.Errorf("floor: redis: bad URL")
		}
		pw, _ := u.User.Password()
		return goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: strings.Split(u.Host, ","), Username: u.User.Username(), Password: pw,
			PoolSize: 1, MinIdleConns: 1, DisableIdentity: true,
		}), nil
	}
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

// take is a Redis floor's attempt on one server (or Cluster): it takes
// key for val, and returns the token when fenced (0 otherwise).
type take func(ctx context.Context, c goredis.UniversalClient, key, val string) (token uint64, ok bool, err error)

// fencedTake is the fenced floors' attempt: setFenced, SET NX PX and the
// INCR of the name's counter in one EVALSHA.
func fencedTake(ttl time.Duration) take {
	ms := strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)
	return func(ctx context.Context, c goredis.UniversalClient, key, val string) (uint64, bool, error) {
		n, err := setFenced.Run(ctx, c, []string{key, fencePrefix + key}, val, ms).Uint64()
		return n, n > 0, err
	}
}

// unfencedTake is what the Redis peers are built on: SET NX PX, no token.
func unfencedTake(ttl time.Duration) take {
	return func(ctx context.Context, c goredis.UniversalClient, key, val string) (uint64, bool, error) {
		ok, err := c.SetNX(ctx, key, val, ttl).Result()
		return 0, ok, err
	}
}

// freeOn is the Redis floors' owner-safe release on one server: true when
// it deleted key, false when key was not val's.
func freeOn(ctx context.Context, c goredis.UniversalClient, key, val string) (bool, error) {
	n, err := delIfOwner.Run(ctx, c, []string{key}, val).Int()
	return n == 1, err
}

// openRedis is the fenced floor: setFenced takes the lock and its token
// (one EVALSHA), delIfOwner frees it.
func openRedis(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error) {
	return openRedisFloor(ctx, rawURL, fencedTake(ttl))
}

// openRedisUnfenced is the floor the Redis peers are built on: SET NX PX
// to take, delIfOwner to free, no token.
func openRedisUnfenced(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error) {
	return openRedisFloor(ctx, rawURL, unfencedTake(ttl))
}

// loadScripts loads the floors' scripts (on every master of a Cluster),
// so that a floor's round trips are EVALSHA, never EVAL.
func loadScripts(ctx context.Context, c goredis.UniversalClient) error {
	for _, s := range []*goredis.Script{setFenced, delIfOwner} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("floor: redis: script load: %w", err)
		}
	}
	return nil
}

// values returns a holder's values, unique among clients: a random
// prefix of this floor and a sequence number (cheaper than a random value
// per attempt).
func values() func() string {
	owner, seq := rand.Text(), uint64(0)
	return func() string {
		seq++
		return owner + strconv.FormatUint(seq, 36)
	}
}

// openRedisFloor opens a Redis floor on one server (redis://, rediss://)
// or a Cluster (redis+cluster://, its key hash-tagged so that the lock
// and its counter share a slot) whose attempt is take, with a value
// unique to this holder and attempt, freed by delIfOwner so that a holder
// whose lease expired cannot free its successor's.
func openRedisFloor(ctx context.Context, rawURL string, take take) (*Lock, error) {
	c, err := redisConn(rawURL)
	if err != nil {
		return nil, err
	}
	if err := loadScripts(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	keyOf := func(name string) string { return keyPrefix + name }
	if _, ok := c.(*goredis.ClusterClient); ok {
		keyOf = func(name string) string { return keyPrefix + "{" + name + "}" }
	}
	next := values()
	return &Lock{
		try: func(ctx context.Context, name string) (*Grant, bool, error) {
			key, val := keyOf(name), next()
			token, ok, err := take(ctx, c, key, val)
			if err != nil || !ok {
				return nil, false, err
			}
			return &Grant{token: token, release: func(ctx context.Context) error {
				ok, err := freeOn(ctx, c, key, val)
				if err == nil && !ok {
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
