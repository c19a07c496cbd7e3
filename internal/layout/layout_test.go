package layout

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// validZnodeName mirrors ZooKeeper's PathUtils.validatePath for one path
// element.
func validZnodeName(s string) bool {
	if s == "" || s == "." || s == ".." || strings.Contains(s, "/") || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == 0 || ZooKeeperForbidden(r) {
			return false
		}
	}
	return true
}

func TestZooKeeperNameRoundTripAndInjective(t *testing.T) {
	seen := make(map[string]string)
	for _, name := range TrickyNames {
		esc := ZooKeeperName(name)
		if !validZnodeName(esc) {
			t.Errorf("ZooKeeperName(%q) = %q: not a valid znode name", name, esc)
		}
		back, err := ZooKeeperUnname(esc)
		if err != nil || back != name {
			t.Errorf("ZooKeeperUnname(ZooKeeperName(%q)) = %q, %v", name, back, err)
		}
		if prev, dup := seen[esc]; dup {
			t.Errorf("%q and %q both escape to %q", prev, name, esc)
		}
		seen[esc] = name
	}
	// Readable names stay readable.
	for _, name := range []string{"orders-42", "é", "中文", "zookeeper", "a.b", "..."} {
		if got := ZooKeeperName(name); got != name {
			t.Errorf("ZooKeeperName(%q) = %q, want it unchanged", name, got)
		}
	}
	// The worst case stays within 3 bytes per input byte.
	worst := strings.Repeat("\U0001F600", 256) // 1024 bytes
	if n := len(ZooKeeperName(worst)); n != 3*1024 {
		t.Errorf("escaped worst case is %d bytes, want %d", n, 3*1024)
	}
	if got := ZooKeeperParent("/dlock", "a/b"); got != "/dlock/a%2Fb" {
		t.Errorf("ZooKeeperParent = %q", got)
	}
}

func FuzzZooKeeperName(f *testing.F) {
	for _, n := range TrickyNames {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" {
			return
		}
		esc := ZooKeeperName(name)
		if !validZnodeName(esc) {
			t.Fatalf("ZooKeeperName(%q) = %q: not a valid znode name", name, esc)
		}
		back, err := ZooKeeperUnname(esc)
		if err != nil || back != name {
			t.Fatalf("round trip of %q gave %q, %v", name, back, err)
		}
	})
}

// TestRedisKeys: one hash tag per name, holding the whole name, one-to-one.
func TestRedisKeys(t *testing.T) {
	k := RedisKeys("dlock:", "orders/42")
	if k.Lock != "dlock:{orders/42}" || k.Fence != k.Lock+":fence" || k.Queue != k.Lock+":q" || k.Channel != k.Lock+":rel" ||
		k.Waiters != k.Lock+":w" || k.WaiterData != k.Lock+":wd" {
		t.Errorf("RedisKeys = %+v", k)
	}
	seen := map[string]string{}
	for _, name := range TrickyNames {
		k := RedisKeys("p:", name)
		lock := k.Lock
		if k.Fence != lock+":fence" || k.Queue != lock+":q" || k.Channel != lock+":rel" || k.Waiters != lock+":w" || k.WaiterData != lock+":wd" {
			t.Errorf("RedisKeys(%q) = %+v: the keys are not the lock key and their suffixes", name, k)
		}
		tag, ok := strings.CutPrefix(lock, "p:{")
		if !ok || strings.IndexByte(tag, '}') != len(tag)-1 || tag == "}" {
			t.Errorf("RedisKeys(%q).Lock = %q: the hash tag does not hold the whole name", name, lock)
		}
		if prev, dup := seen[lock]; dup {
			t.Errorf("%q and %q share the key %q", prev, name, lock)
		}
		seen[lock] = name
	}
}

// TestRedisKeysOneAllocation: a driver derives the keys on every acquire
// of a name it has not seen lately, so they share one allocation, long
// names included (a name of over 32 bytes made the lock key apart, on the
// heap, before the shared string).
func TestRedisKeysOneAllocation(t *testing.T) {
	for _, name := range []string{"orders/42", "bench/driver/" + strings.Repeat("x", 40) + "/1234"} {
		if n := testing.AllocsPerRun(100, func() { _ = RedisKeys("dlock:", name) }); n != 1 {
			t.Errorf("RedisKeys(%d-byte name): %v allocations, want 1", len(name), n)
		}
	}
}
