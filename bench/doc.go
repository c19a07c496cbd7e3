// Package bench is dlock's comparative benchmark: the workloads, the
// runner, the statistics and the reports behind the dlockbench command
// (bench/cmd/dlockbench, run by `make bench`).
//
// # Targets
//
// A Target is one row of the report, plain data so that it can cross a
// process boundary:
//
//   - KindDlock: a backend and strategy, opened by URL with dlock.Open, so
//     every backend the drivers register is measured through the same
//     portable API (*dlock.Locker) that applications use;
//   - KindRTT: the server's raw round trip (Redis PING, ZooKeeper exists,
//     SELECT 1, an etcd linearizable Get);
//   - KindFloor: the strategy's hand-written floor, the fewest round trips
//     that take and free the lock on one connection (SET NX PX + EVALSHA
//     compare-and-delete; create ephemeral + delete; BEGIN; SELECT … FOR
//     UPDATE + COMMIT; a conditional UPDATE of a lease row; advisory locks;
//     GET_LOCK; an etcd lease grant + a put-if-absent transaction that reads
//     the queue's lowest create revision + delete, in etcd.go);
//   - KindPeer: another library on the same server (redsync,
//     bsm/redislock, go-zookeeper's zk.Lock, etcd's concurrency.Mutex).
//
// TargetsFor lists the targets of a server; Open connects one Client of a
// target. Each client is a separate user of the lock with its own
// connection or session.
//
// # Workloads, rounds and the runner
//
// Plan returns the workloads (uncontended on one name and on fresh names,
// many keys, handoff, fairness, open loop, the counting semaphore of
// semaphore.go (RunSemaphore: more clients than permits, beside each
// backend's semaphore floor), and the scale curves of
// scale.go: one Locker as its names, leases and waiters grow, measured by
// RunScale). Every figure is measured in rounds, the targets taking
// turns within each, so that a burst of load on the machine lands on all
// of them alike:
//
//   - RunAlternating measures the uncontended workload with one client of
//     every target open in one process, taking turns in short slices
//     (GroupedRotation order, a server's targets together) over many
//     rounds;
//   - Runner.Run measures one target on one contended workload for one
//     slice: it connects every client, warms every name, reads the
//     server's counters (Server.Sample: Redis INFO commandstats, CPU time
//     from /proc), runs the clients, reads the counters again and merges
//     the clients' HdrHistograms. dlockbench runs every target one slice
//     per round. With Runner.Procs > 1 the clients run in child processes
//     that re-execute the program (ChildMain must be called first thing in
//     main and in TestMain).
//   - Quiet (quiet.go) records per slice what the run's other servers and
//     the machine did, and with dlockbench -settle settles those servers
//     before each timed slice of the contended workloads: it waits,
//     bounded, until none of them burns CPU or writes to storage, so that
//     a server's aftermath (a WAL flush, a purge) does not land on the
//     next target's slice.
//
// AggregateRounds turns a target's rounds into a Row: percentiles from the
// merged histograms, and each headline figure as the median of the rounds
// with a confidence interval (internal/stats.MedianCI, order statistics).
//
// Every critical section goes through a Checker, shared by all processes
// of a run through a memory-mapped file: it counts mutual-exclusion
// violations (two holders of a name at once) and fencing violations (a
// token not above the previous holder's), and measures handoff latency
// from the holder's release call to the next holder's acquire returning on
// one monotonic clock (Now: CLOCK_MONOTONIC, the same in every process).
//
// # Reports and the verdict
//
// Finalize fills in the ratios to the round trip, the floor, the ideal
// contended rate and the best peer, each paired per round and summarised
// with an interval. The ideal's handover gap comes from the paced
// references (Pacer, Paced): the floor's release and the round trip,
// each timed after a sleep of the hold in the same round as the rows, as
// the handoff's holders and waiters wake cold after theirs. Decide (DecideFaults with the fault suite's figures)
// builds the Verdict: the winner of each workload or a tie, safety beside
// speed, the seed articles' claims, a paragraph for a design document.
// Report writes the verdict and the terminal tables (WriteText,
// WriteTable), report.json (null for a figure that does not apply),
// report.csv and index.html (WriteFiles). index.html opens with the
// verdict and draws its charts as inline SVG (charts.go, svg.go): no
// script, so it opens offline and prints.
//
// bench/README.md explains every column.
package bench
