package zookeeper

import (
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/backendtest"
)

// The conformance harnesses (internal/backendtest) run the suite on real
// ZooKeeper servers under a 2s session timeout: short, so that expiries
// are quick, but far above the ping interval. Each Locker connects
// through its own proxies (one per member), so that Disconnect can
// black-hole that client as a network failure would: the session then
// expires on the server, and the lease must be reported lost before
// another client is granted. Revoke deletes the holder's node with a
// separate session, as the server does when the holder's session expires.
// Residue counts the queued nodes that are not the holder. At the end no
// lock node may be left under any harness's prefix.
var conformanceOptions = &backendtest.Options{SessionTimeout: 2 * time.Second}

// TestConformance runs the suite on a single server of its own per recipe
// (the basic recipe must pass the safety cases too), with the Restarter
// hook.
func TestConformance(t *testing.T) {
	for _, recipe := range []string{RecipeFair, RecipeBasic} {
		t.Run(recipe, func(t *testing.T) {
			env := func() *backendtest.Env { return backendtest.Lookup("zookeeper").New(t, conformanceOptions) }
			backendtest.Conformance(t, env, recipe, &backendtest.HarnessOptions{Restarter: true}, conformance.WithSlack(time.Second))
		})
	}
}

// TestConformanceEnsemble runs the suite on a 3-node ensemble, for both
// recipes.
func TestConformanceEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node ensemble")
	}
	var once sync.Once
	var e *backendtest.Env
	env := func() *backendtest.Env {
		once.Do(func() { e = backendtest.Lookup("zookeeper-ensemble").New(t, conformanceOptions) })
		return e
	}
	for _, recipe := range []string{RecipeFair, RecipeBasic} {
		t.Run(recipe, func(t *testing.T) { backendtest.Conformance(t, env, recipe, nil, conformance.WithSlack(time.Second)) })
	}
}
