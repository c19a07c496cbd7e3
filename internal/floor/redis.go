package floor

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// delIfOwner is the Redis floor's compare-and-delete.
//
// KEYS[1]: the lock's key. ARGV[1]: the holder's value.
// Returns 1 when it deleted the key, 0 when the key was not the holder's.
var delIfOwner = goredis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

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

// openRedis: SET key value NX PX ttl to take, where value is unique to
// this holder and attempt; a compare-and-delete script (EVALSHA) to free,
// so that a holder whose lease expired cannot free its successor's.
func openRedis(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error) {
	c, err := redisConn(rawURL)
	if err != nil {
		return nil, err
	}
	if err := delIfOwner.Load(ctx, c).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("floor: redis: script load: %w", err)
	}
	// A value unique among clients: this client's random prefix and a
	// sequence number (cheaper than a random value per attempt).
	owner, seq := rand.Text(), uint64(0)
	return &Lock{
		try: func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
			seq++
			key, val := keyPrefix+name, owner+strconv.FormatUint(seq, 36)
			ok, err := c.SetNX(ctx, key, val, ttl).Result()
			if err != nil || !ok {
				return nil, false, err
			}
			return func(ctx context.Context) error {
				n, err := delIfOwner.Run(ctx, c, []string{key}, val).Int()
				if err == nil && n != 1 {
					err = ErrNotHeld
				}
				return err
			}, true, nil
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
