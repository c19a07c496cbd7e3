package redis

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/backendtest"
)

// TestConformance runs the suite against a single server, a 3-master
// cluster and Redlock over 3 and 5 nodes (servers shared by the test
// binary, each harness on its own key prefix). The harnesses
// (internal/backendtest) implement Revoker and Residue, and Disconnector
// (connections closed, new ones refused) except on the cluster, whose
// client learns the nodes' own addresses; not Restarter (tokens are not
// declared to survive a restart; TestRestartWithPersistence covers it).
func TestConformance(t *testing.T) {
	splitVotes := conformance.WithSkip("Redlock promises at most one winner, not exactly one: concurrent attempts on a free name can split the nodes' votes so that none reaches the quorum (each then retries after a random delay)",
		"ConcurrentTryAcquireOneWinner")
	for _, tc := range []struct {
		name    string
		backend string
		nodes   int
		opts    []conformance.Option
	}{
		{"single", "redis", 0, nil},
		{"cluster", "redis-cluster", 0, nil},
		{"redlock3", "redlock", 3, []conformance.Option{splitVotes}},
		{"redlock5", "redlock", 5, []conformance.Option{splitVotes}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := func() *backendtest.Env {
				return backendtest.Lookup(tc.backend).Shared(t, &backendtest.Options{Nodes: tc.nodes})
			}
			backendtest.Conformance(t, env, "", nil, append(tc.opts, conformance.WithSlack(time.Second))...)
		})
	}
}
