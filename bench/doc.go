// Package bench is dlock's comparative benchmark: workloads, the runner,
// statistics and reports behind the dlockbench command (cmd/dlockbench).
//
// It measures every backend and strategy through the portable API
// (*dlock.Locker from dlock.Open, so every target is a URL), and, in the
// same run, each server's raw round trip, each strategy's hand-written
// floor and the peer libraries (redsync, bsm/redislock, go-zookeeper's
// zk.Lock), so that every figure is also a ratio.
package bench
