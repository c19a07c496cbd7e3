// Package faults is dlock's fault-injection suite: it checks that every
// backend stays safe when its clients pause, die, lose their network or
// their replies, and when its servers crash, fail over or evict.
//
// It lives in faults/ rather than conformance/faults because the
// conformance package is owned and written separately; this package only
// uses the conformance package's fenced register and its porcupine
// fenced-mutex checker, it does not extend them.
//
// # What a run does
//
// Run starts 5–10 client processes (the running binary re-executed: call
// ChildMain first in TestMain or main) on one lock name. Each loops:
// acquire → write its fencing token to a fenced register → hold for a
// random 0–2×TTL (with keep-alive) → write again → release. Each client
// reaches its servers through its own in-process TCP proxies (the
// project's one proxy, internal/netproxy) owned by the parent, so the
// parent can cut it off silently (bytes dropped both ways) or with resets
// (RST as soon as it speaks), delay it (latency), or drop the replies of
// its next request (the server acts, the client never hears).
//
// Clients report every call over a pipe before making it and when it
// returns; the parent timestamps both on its own monotonic clock (a
// client's clock is never trusted for a time, only for durations), owns
// the fenced register (a client's write is a request to the parent), and
// injects the fault on a schedule: SIGSTOP/SIGCONT of the holder past its
// TTL, SIGKILL of the holder, proxy cuts, lost replies, server kill and
// restart (a ZooKeeper or etcd follower and the leader, and every server
// of a cluster at once), an ensemble's leader frozen past the lease (a
// partition that cuts one member off, then heals), Redis failover to a
// replica promoted before the grant replicated, eviction under maxmemory,
// and a Redlock node's key expired early (a clock jump).
//
// # What is checked
//
//   - the fenced history (grants with their tokens, releases, losses,
//     register writes) with the conformance package's porcupine
//     fenced-mutex checker (conformance.CheckFenced; the mutex part only
//     for backends whose Capabilities deny fencing): a history it cannot
//     linearize counts as one violation and its visualisation is saved;
//     violations must be 0. A lease that ended without a successful
//     release becomes a loss the model may place anywhere from its
//     acquire's call to the moment its holder learned of it (or, failing
//     that, the next grant), so a token that went backwards or a stale
//     write the register accepted are violations and nothing else is;
//   - the raw acquire/release intervals as a plain mutex: overlapping
//     grants are counted and the longest overlap reported, as a measured
//     unsafe window, not as a failure;
//   - the time from a holder's death to the next grant, against the
//     backend's Capabilities().ReleaseOnCrash bound;
//   - whether every lost lease was signalled to its holder (Done closed,
//     or its local deadline passed) before another holder was granted.
//
// # Semaphore runs
//
// Every backend whose Capabilities.MaxPermits allows it also runs the
// kill and pause faults (Options.SemaphoreFaults) with the clients taking
// permits of one semaphore of two (Options.Permits) instead of the lock.
// The register is then conformance.SemRegister (it refuses a token lower
// than the N highest written) and the history is checked against the
// fenced semaphore model (conformance.CheckFencedSemaphore: never more
// than N holders, tokens strictly increasing across permits, an accepted
// write only by a holder); the raw overlaps count the grants that made
// more than N clients believe they held a permit. Which grant took a lost
// permit is not known with N permits, so recovery and the loss signal are
// not measured there (the conformance suite checks the crash bound).
//
// Faults that a backend is documented not to survive (Redis failover and
// eviction, Redlock keys expiring early: a clock jump) report their fenced
// violations, raw overlaps and unsignalled losses without failing: that
// is what fencing is for.
//
// On a TTL-bound backend a lost lease counts as signalled when its local
// deadline (Lease.Deadline) passed before the next grant: a paused process
// cannot run the timer that closes Done, and its writes after the resume
// are what the fenced register rejects ("writes rejected").
//
// # Short and long mode
//
// go test -race ./faults/ runs every backend × fault that can run here for
// a few seconds each (TestFaults: about 7 minutes on 2 cores, two
// backends at a time, TTL 500ms; etcd's leases are whole seconds, at least
// 2s, so its runs are scaled to its TTL). faults/cmd/dlockchaos runs the same suite for
// as long as wanted and writes faults.txt, faults.json and faults.html,
// with every run's history (JSON) and porcupine's visualisation of each
// history the checker rejected.
package faults
