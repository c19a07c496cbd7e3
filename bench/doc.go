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
//     SELECT 1);
//   - KindFloor: the strategy's hand-written floor, the fewest round trips
//     that take and free the lock on one connection (SET NX PX + EVALSHA
//     compare-and-delete; create ephemeral + delete; BEGIN; SELECT … FOR
//     UPDATE + COMMIT; a conditional UPDATE of a lease row; advisory locks;
//     GET_LOCK);
//   - KindPeer: another library on the same server (redsync,
//     bsm/redislock, go-zookeeper's zk.Lock).
//
// TargetsFor lists the targets of a server; Open connects one Client of a
// target. Each client is a separate user of the lock with its own
// connection or session.
//
// # Workloads and the runner
//
// Plan returns the workloads (uncontended, many keys, handoff, fairness,
// open loop). Runner.Run measures one target on one workload: it connects
// every client, warms each up, reads the server's counters (Server.Sample:
// Redis INFO commandstats, CPU time from /proc), runs the clients for the
// workload's duration, reads the counters again and merges the clients'
// HdrHistograms. With Runner.Procs > 1 the clients run in child processes
// that re-execute the program (ChildMain must be called first thing in
// main and in TestMain).
//
// Every critical section goes through a Checker, shared by all processes
// of a run through a memory-mapped file: it counts mutual-exclusion
// violations (two holders of a name at once) and fencing violations (a
// token not above the previous holder's), and measures handoff latency
// from the holder's release call to the next holder's acquire returning on
// one monotonic clock (Now: CLOCK_MONOTONIC, the same in every process).
//
// # Reports
//
// NewRow turns a Result into a Row; Finalize fills in the ratios to the
// round trip, the floor, the ideal contended rate and the best peer from
// the rows of the same run. Report writes the terminal table (WriteTable),
// report.json, report.csv and index.html (WriteFiles). index.html draws
// its charts with go-echarts and carries the ECharts library inline, so it
// opens offline.
//
// bench/README.md explains every column.
package bench
