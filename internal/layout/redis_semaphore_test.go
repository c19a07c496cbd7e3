package layout

import "testing"

// TestRedisSemaphoreKeys: a semaphore's keys share its name's hash tag
// and are never a lock's key or channel, of the same name or another,
// under the same prefix or another.
func TestRedisSemaphoreKeys(t *testing.T) {
	names := append([]string{"x", "x:s", "x}:s", "{x}:s", "s", ":s", "x:s:fence", ""}, TrickyNames...)
	prefixes := []string{"dlock:", "dlock:s", "p", ""}
	lockKeys := map[string]bool{}
	for _, p := range prefixes {
		for _, n := range names {
			k := RedisKeys(p, n)
			for _, key := range []string{k.Lock, k.Fence, k.Queue, k.Channel, k.Waiters, k.WaiterData} {
				lockKeys[key] = true
			}
		}
	}
	for _, p := range prefixes {
		for _, n := range names {
			s := RedisSemaphoreKeys(p, n)
			lock := RedisKeys(p, n).Lock
			for _, key := range []string{s.Holders, s.Tokens, s.Permits, s.Fence, s.Queue, s.Channel} {
				if lockKeys[key] {
					t.Errorf("semaphore %q under %q: key %q is a lock key", n, p, key)
				}
				if len(key) < len(lock) || key[:len(lock)] != lock {
					t.Errorf("semaphore %q under %q: key %q is not in the hash tag %q", n, p, key, lock)
				}
			}
		}
	}
}
