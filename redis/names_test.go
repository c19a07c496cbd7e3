package redis

import (
	"strconv"
	"testing"

	"github.com/dlock-go/dlock/internal/layout"
)

// TestNameCache: whatever the cache holds (a name seen before, a name
// whose slot another name took since, more names than slots), get returns
// the name's own keys, as internal/layout lays them out, and this Locker's
// wake-up channel; a name seen again is not derived again.
func TestNameCache(t *testing.T) {
	c := newNameCache("p:", "LOCKERID")
	check := func(name string) *names {
		t.Helper()
		n := c.get(name)
		if want := keysFor("p:", name); n.keys != want || n.name != name {
			t.Fatalf("get(%q) = %+v, want the keys %+v", name, n.keys, want)
		}
		if want := n.channel + ":LOCKERID"; n.wake != want {
			t.Fatalf("get(%q).wake = %q, want %q", name, n.wake, want)
		}
		if n.lockArg != any(n.lock) {
			t.Fatalf("get(%q): the boxed arguments are not the keys: %+v", name, n)
		}
		return n
	}
	var all []string
	all = append(all, layout.TrickyNames...)
	for i := range 3 * nameSlots {
		all = append(all, "orders/"+strconv.Itoa(i))
	}
	for range 2 {
		for _, name := range all {
			check(name)
		}
	}
	first := check("orders/42")
	if again := check("orders/42"); again != first {
		t.Error("a name seen just before was derived again")
	}
}

// TestFreshNameAllocations: a single server or Cluster Locker's blocking
// Acquire and release take the lock key alone, so a name not seen lately
// costs its names, its keys (one string) and the lock key boxed; the keys
// a TryAcquire takes besides are boxed at its first, and kept.
func TestFreshNameAllocations(t *testing.T) {
	c := newNameCache("p:", "")
	fresh := make([]string, 200)
	for i := range fresh {
		fresh[i] = "orders/" + strconv.Itoa(i)
	}
	i := 0
	if n := testing.AllocsPerRun(100, func() { c.get(fresh[i]); i++ }); n > 3 {
		t.Errorf("get of a fresh name: %v allocations, want at most 3", n)
	}
}
