package etcd

import (
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/backendtest"
)

// The suite runs with etcd's shortest lease (MinTTL, 2s: etcd grants whole
// seconds and no less than 1.5 × its election timeout) and a slack of 1s:
// the server's lessor looks for expired leases every 500ms, so a lease
// ends on the server up to that much after its TTL.
//
// The harnesses (internal/backendtest) reach each Locker's servers through
// proxies of its own (Disconnect closes them and refuses new connections),
// Revoke revokes the holder's etcd lease through the JSON gateway (as the
// server does when the lease expires), Residue counts the keys of the
// name's queue besides the holder's, and at the end no key may be left
// under any harness's prefix.
var suiteOptions = []conformance.Option{conformance.WithTTL(MinTTL), conformance.WithSlack(time.Second)}

// TestConformance runs the suite on a one-member cluster of its own, with
// the Restarter hook (the member is killed with SIGKILL and started again
// on its data: fsync is on, so the revision, and with it the tokens, keep
// growing).
func TestConformance(t *testing.T) {
	env := func() *backendtest.Env { return backendtest.Lookup("etcd").New(t, nil) }
	backendtest.Conformance(t, env, "", &backendtest.HarnessOptions{Restarter: true}, suiteOptions...)
}

// TestConformanceCluster runs the suite on a 3-member cluster, each
// Locker connected to all three members, with the Restarter hook (every
// member killed at once and started again).
func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member cluster")
	}
	var once sync.Once
	var e *backendtest.Env
	env := func() *backendtest.Env {
		once.Do(func() { e = backendtest.Lookup("etcd-cluster").New(t, nil) })
		return e
	}
	backendtest.Conformance(t, env, "", &backendtest.HarnessOptions{Restarter: true}, suiteOptions...)
}

// TestHooks checks that the hooks and the driver agree on the key layout.
func TestHooks(t *testing.T) {
	backendtest.CheckHooks(t, backendtest.Lookup("etcd"))
}
