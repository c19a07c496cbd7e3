package bench

import (
	"slices"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Kinds of target: what a row of the report measures.
const (
	KindDlock = "dlock" // a dlock backend and strategy, opened by URL
	KindPeer  = "peer"  // another lock library on the same server
	KindFloor = "floor" // the hand-written minimum for a strategy
	KindRTT   = "rtt"   // the server's raw round trip
)

// LeaseTTL is the lease length every lock in the benchmark asks for
// (dlock's TTL, redsync's expiry, redislock's ttl), so that no
// implementation is favoured by a shorter or longer lease.
const LeaseTTL = 10 * time.Second

// Target names one thing to measure. It is plain data (it crosses the
// process boundary with -procs): Open turns it into clients.
type Target struct {
	// Name is the row label in every table: "redis", "postgres/advisory",
	// "redsync", "floor redis", "rtt redis".
	Name string `json:"name"`
	// Kind is KindDlock, KindPeer, KindFloor or KindRTT.
	Kind string `json:"kind"`
	// Impl selects the peer, floor or RTT implementation (see Open).
	Impl string `json:"impl,omitempty"`
	// URL is the dlock URL (KindDlock) or the server URL the peer, floor
	// or RTT client connects to. It may hold a password: reports use
	// RedactedURL.
	URL string `json:"url"`
	// Backend is the server family: memory, redis, zookeeper, postgres, mysql.
	Backend string `json:"backend"`
	// Server identifies the server instance (for server metrics).
	Server string `json:"server,omitempty"`
	// Floor is the Name of the floor target this one is compared with.
	Floor string `json:"floor,omitempty"`
	// RTT is the Name of the RTT target of its server.
	RTT string `json:"rtt,omitempty"`
	// InProcessOnly: the target cannot be shared by separate processes
	// (mem://), so -procs runs it in one process.
	InProcessOnly bool `json:"in_process_only,omitempty"`
	// Note says how the target is configured (peers' retry policy...).
	Note string `json:"note,omitempty"`
	// Only limits the target to these workload kinds (nil: all it can run).
	Only []string `json:"only,omitempty"`
}

// RedactedURL is the URL without its password.
func (t Target) RedactedURL() string { return driver.Redact(t.URL) }

// Contends reports whether the target can run contended workloads:
// floors and round trips measure one uncontended operation only.
func (t Target) Contends() bool { return t.Kind == KindDlock || t.Kind == KindPeer }

// Runs reports whether the target takes part in a workload kind: floors
// and round trips only in the uncontended one, and Only when it is set.
func (t Target) Runs(kind string) bool {
	if len(t.Only) > 0 && !slices.Contains(t.Only, kind) {
		return false
	}
	return kind == Uncontended || t.Contends()
}
