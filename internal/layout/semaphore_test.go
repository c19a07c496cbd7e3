package layout

import (
	"strings"
	"testing"
)

// TestSemaphoresApartFromLocks: no semaphore's node or key is a lock's, for
// the tricky names, and semaphores stay one-to-one among themselves.
func TestSemaphoresApartFromLocks(t *testing.T) {
	locksZK, locksEtcd := map[string]bool{}, map[string]bool{}
	for _, name := range TrickyNames {
		locksZK[ZooKeeperParent("/p", name)] = true
		locksEtcd[EtcdQueue("/p", name)] = true
	}
	semsZK, semsEtcd := map[string]string{}, map[string]string{}
	for _, name := range TrickyNames {
		zp, eq := ZooKeeperSemaphoreParent("/p", name), EtcdSemaphoreQueue("/p", name)
		if locksZK[zp] || locksEtcd[eq] {
			t.Errorf("semaphore %q shares a lock's node %q or queue %q", name, zp, eq)
		}
		if el := zp[len("/p/"):]; !validZnodeName(el) {
			t.Errorf("ZooKeeperSemaphoreParent(%q) = %q: not a valid znode name", name, zp)
		}
		for q := range locksEtcd {
			if strings.HasPrefix(eq, q) || strings.HasPrefix(q, eq) {
				t.Errorf("semaphore queue %q and lock queue %q overlap", eq, q)
			}
		}
		if prev, dup := semsZK[zp]; dup {
			t.Errorf("semaphores %q and %q share %q", prev, name, zp)
		}
		if prev, dup := semsEtcd[eq]; dup {
			t.Errorf("semaphores %q and %q share %q", prev, name, eq)
		}
		semsZK[zp], semsEtcd[eq] = name, name
	}
}
