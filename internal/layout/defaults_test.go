package layout_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/redis"
	"github.com/dlock-go/dlock/zookeeper"
)

// TestDefaultPrefixes: the test hooks find a URL's keys where the drivers
// put them when the URL names no prefix.
func TestDefaultPrefixes(t *testing.T) {
	if redis.DefaultPrefix != layout.RedisDefaultPrefix {
		t.Errorf("redis.DefaultPrefix %q, layout.RedisDefaultPrefix %q", redis.DefaultPrefix, layout.RedisDefaultPrefix)
	}
	if zookeeper.DefaultPrefix != layout.ZooKeeperDefaultPrefix {
		t.Errorf("zookeeper.DefaultPrefix %q, layout.ZooKeeperDefaultPrefix %q", zookeeper.DefaultPrefix, layout.ZooKeeperDefaultPrefix)
	}
}
