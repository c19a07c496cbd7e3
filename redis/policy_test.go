package redis

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestEvictionPolicyRefused: a server whose maxmemory-policy is allkeys-*
// (which may evict a held lock's key and the fence counter) is refused
// with ErrInvalidOption before anything is written, on a single server, a
// Cluster master and one Redlock node; Open refuses it too (checkOpen);
// volatile-* is accepted, and so is a server whose CONFIG command is
// renamed away (its policy cannot be known).
func TestEvictionPolicyRefused(t *testing.T) {
	single := testenv.NewRedis(t, nil)
	cluster := testenv.NewRedisCluster(t, 3)
	nodes := testenv.NewRedisNodes(t, 3, nil)
	rl := redlockOn(t, nodes)
	for _, tc := range []struct {
		name, url string
		victim    *testenv.Server // the server set to allkeys-*
		raw       []*testenv.Server
	}{
		{"single", single.URL, single, []*testenv.Server{single}},
		{"cluster", cluster.URL, cluster.Nodes[1], cluster.Nodes[1:2]}, // EXISTS elsewhere is MOVED
		{"redlock3", rl.url, nodes[2], nodes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			for _, policy := range []string{"allkeys-lru", "allkeys-lfu", "allkeys-random"} {
				if _, err := testenv.RedisDo(ctx, tc.victim.Addr, "CONFIG", "SET", "maxmemory-policy", policy); err != nil {
					t.Fatal(err)
				}
				drv, err := openURL(ctx, tc.url)
				if err != nil {
					t.Fatal(err)
				}
				if err := checkOpen(ctx, drv); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), policy) {
					t.Errorf("%s: checkOpen: %v, want ErrInvalidOption naming the policy", policy, err)
				}
				drv.Close()
				l := open(t, ctx, tc.url)
				// Names on every master of the cluster: one is on the victim.
				for i := range 12 {
					name := uniqueName(t) + "/" + string(rune('a'+i))
					k := keysFor(DefaultPrefix, name)
					onVictim := tc.name != "cluster" || cluster.Nodes[keySlot(k.lock)*3/clusterSlots] == tc.victim
					ls, err := l.TryAcquire(ctx, name, nil)
					switch {
					case onVictim && !errors.Is(err, dlock.ErrInvalidOption):
						if err == nil {
							ls.Release(ctx)
						}
						t.Fatalf("%s: TryAcquire: %v, want ErrInvalidOption", policy, err)
					case onVictim:
						if !strings.Contains(err.Error(), "maxmemory-policy "+policy) || strings.Count(err.Error(), "dlock:") != 1 {
							t.Errorf("%s: error %q", policy, err)
						}
						for _, s := range tc.raw {
							if v, _ := testenv.RedisDo(ctx, s.Addr, "EXISTS", k.lock, k.fence); v != int64(0) {
								t.Errorf("%s: a refused attempt wrote to %s", policy, s.Addr)
							}
						}
					case err != nil:
						t.Fatalf("%s: TryAcquire on a master with noeviction: %v", policy, err)
					default:
						ls.Release(ctx)
					}
				}
			}
			// Fixed: accepted at the next attempt (a refusal is not cached).
			if _, err := testenv.RedisDo(ctx, tc.victim.Addr, "CONFIG", "SET", "maxmemory-policy", "volatile-lru"); err != nil {
				t.Fatal(err)
			}
			defer testenv.RedisDo(ctx, tc.victim.Addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
			l := open(t, ctx, tc.url)
			for i := range 12 {
				ls, err := l.TryAcquire(ctx, uniqueName(t)+"/"+string(rune('a'+i)), nil)
				if err != nil {
					t.Fatalf("volatile-lru: %v", err)
				}
				ls.Release(ctx)
			}
		})
	}
	t.Run("config-renamed", func(t *testing.T) {
		ctx := testCtx(t)
		s := testenv.NewRedis(t, &testenv.RedisOptions{Config: []string{`rename-command CONFIG ""`}})
		drv, err := openURL(ctx, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer drv.Close()
		if err := checkOpen(ctx, drv); err != nil {
			t.Errorf("checkOpen with CONFIG renamed: %v", err)
		}
		ls, err := open(t, ctx, s.URL).TryAcquire(ctx, uniqueName(t), nil)
		if err != nil {
			t.Fatalf("TryAcquire with CONFIG renamed: %v, want the policy treated as unknown", err)
		}
		ls.Release(ctx)
	})
}
