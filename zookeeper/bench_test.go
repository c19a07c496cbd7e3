package zookeeper

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// Benchmarks against real servers, compared with go-zookeeper's own
// zk.Lock in the same run. Run them with a fixed iteration count, e.g.
//
//	go test -run '^$' -bench . -benchtime 2000x -count 5 ./zookeeper/
//
// Each benchmark starts its own servers: one with forceSync=no
// (-Dzookeeper.forceSync=no: the transaction log is not fsynced) and one with
// forceSync=yes (ZooKeeper's default: fsync on every write).

func syncModes() []bool { return []bool{false, true} }

func syncName(forceSync bool) string {
	if forceSync {
		return "forceSync=yes"
	}
	return "forceSync=no"
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// BenchmarkUncontended: one client acquires and releases a free lock, with
// dlock's fair recipe (fair: the default, one multi that creates the node
// and tells whether it is alone; piped: the same with a getChildren sent
// along with every create), its basic recipe and go-zookeeper's zk.Lock
// (create, getChildren, delete), the four interleaved in each iteration so
// that they see the same server and the same machine noise. Reported: the
// p50 of each (µs) and the ratios to zk.Lock's p50. ns/op is the sum of
// the four.
func BenchmarkUncontended(b *testing.B) {
	for _, fs := range syncModes() {
		srv := testenv.NewZooKeeper(b, &testenv.ZKOptions{ForceSync: fs})
		b.Run(syncName(fs), func(b *testing.B) {
			prefix := testPrefix(b)
			fair := open(b, srv.URL, prefix, "")
			piped := open(b, srv.URL, prefix+"-piped", "")
			driverOf(piped).pipeline = true
			basic := open(b, srv.URL, prefix+"-basic", "recipe=basic")
			conn := adminConn(b, srv.Addr)
			zl := zk.NewLock(conn, prefix+"-zklock/u", zk.WorldACL(zk.PermAll))
			ctx := testCtx(b, 10*time.Minute)
			opFair, opPiped, opBasic := acquireRelease(ctx, fair), acquireRelease(ctx, piped), acquireRelease(ctx, basic)
			opZK := func() error {
				if err := zl.Lock(); err != nil {
					return err
				}
				return zl.Unlock()
			}
			ops := []func() error{opFair, opBasic, opZK, opPiped}
			times := make([][]time.Duration, len(ops))
			for _, op := range ops { // parents exist, JIT warm
				for range 20 {
					if err := op(); err != nil {
						b.Fatal(err)
					}
				}
			}
			missed := driverOf(fair).relistings.Load()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j, op := range ops {
					t0 := time.Now()
					if err := op(); err != nil {
						b.Fatal(err)
					}
					times[j] = append(times[j], time.Since(t0))
				}
			}
			b.StopTimer()
			f, ba, z, pp := p50(times[0]), p50(times[1]), p50(times[2]), p50(times[3])
			b.ReportMetric(micros(pp), "piped-p50-µs")
			b.ReportMetric(float64(pp)/float64(z), "piped/zklock")
			b.ReportMetric(micros(f), "fair-p50-µs")
			b.ReportMetric(micros(ba), "basic-p50-µs")
			b.ReportMetric(micros(z), "zklock-p50-µs")
			b.ReportMetric(float64(f)/float64(z), "fair/zklock")
			b.ReportMetric(float64(ba)/float64(z), "basic/zklock")
			b.ReportMetric(float64(driverOf(fair).relistings.Load()-missed)/float64(b.N), "relists/op")
		})
	}
}

// acquireRelease returns one uncontended cycle on l.
func acquireRelease(ctx context.Context, l *dlock.Locker) func() error {
	return func() error {
		ls, err := l.Acquire(ctx, "u", nil)
		if err != nil {
			return err
		}
		return ls.Release(ctx)
	}
}

// writeRTT is the median of n setData round trips on conn.
func writeRTT(b *testing.B, conn *zk.Conn, path string, n int) time.Duration {
	if _, err := conn.Create(path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := conn.Set(path, nil, -1); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	return p50(ds)
}

// BenchmarkHandoff: 8 clients (8 sessions) contend for one lock; each holds
// it 1ms and waits 2ms before queueing again. One iteration is one grant of
// each implementation: dlock's fair recipe, its basic recipe and
// go-zookeeper's zk.Lock run in alternating phases of 250 grants, so that
// they share the machine's noise. The ideal rate is 1/(hold + one write
// round trip): the holder's release (a delete) is the one write between
// two holds; the write round trip is the median setData round trip
// measured before and after, in the same run. Reported per implementation:
// grants/s, ratio (to the ideal with the nominal 1ms hold), hold-µs (how
// long a hold really lasted: time.Sleep overshoots on a loaded machine) and
// ratio-real-hold (to 1/(that hold + the write round trip)); for the fair
// recipe also the share of grants made on the predecessor's deletion event
// without another round trip; and fair/zklock, the throughput ratio.
func BenchmarkHandoff(b *testing.B) {
	const (
		workers = 8
		hold    = time.Millisecond
		gap     = 2 * time.Millisecond
		phase   = 250
	)
	impls := []string{RecipeFair, RecipeBasic, "zklock"}
	for _, fs := range syncModes() {
		srv := testenv.NewZooKeeper(b, &testenv.ZKOptions{ForceSync: fs})
		b.Run(syncName(fs), func(b *testing.B) {
			prefix := testPrefix(b)
			admin := adminConn(b, srv.Addr)
			ctx := testCtx(b, 30*time.Minute)
			type cycle func() (release func() error, err error)
			clients := make(map[string][]cycle)
			var fairLockers []*dlock.Locker
			for _, impl := range impls {
				for range workers {
					if impl == "zklock" {
						zl := zk.NewLock(adminConn(b, srv.Addr), prefix+"-zklock/h", zk.WorldACL(zk.PermAll))
						clients[impl] = append(clients[impl], func() (func() error, error) { return zl.Unlock, zl.Lock() })
						continue
					}
					l := open(b, srv.URL, prefix+"-"+impl, "recipe="+impl)
					if impl == RecipeFair {
						fairLockers = append(fairLockers, l)
					}
					clients[impl] = append(clients[impl], func() (func() error, error) {
						ls, err := l.Acquire(ctx, "h", nil)
						if err != nil {
							return nil, err
						}
						return func() error { return ls.Release(ctx) }, nil
					})
				}
				for _, c := range clients[impl] { // warm up; parents exist
					rel, err := c()
					if err != nil {
						b.Fatal(err)
					}
					_ = rel()
				}
			}
			// runPhase makes n grants with the clients and returns the
			// time it took and the total time the lock was held.
			runPhase := func(cs []cycle, n int64) (time.Duration, time.Duration) {
				var grants, held atomic.Int64
				var wg sync.WaitGroup
				start := time.Now()
				for _, c := range cs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for grants.Add(1) <= n {
							rel, err := c()
							if err != nil {
								b.Error(err)
								return
							}
							t0 := time.Now()
							time.Sleep(hold)
							held.Add(int64(time.Since(t0)))
							if err := rel(); err != nil {
								b.Error(err)
								return
							}
							time.Sleep(gap)
						}
					}()
				}
				wg.Wait()
				return time.Since(start), time.Duration(held.Load())
			}
			rtt1 := writeRTT(b, admin, prefix+"-rtt", 300)
			elapsed := make([]time.Duration, len(impls))
			held := make([]time.Duration, len(impls))
			var fast0 int64
			for _, l := range fairLockers {
				fast0 += driverOf(l).fastGrants.Load()
			}
			b.ResetTimer()
			for done := 0; done < b.N; done += phase {
				n := int64(min(phase, b.N-done))
				for i, impl := range impls {
					e, h := runPhase(clients[impl], n)
					elapsed[i] += e
					held[i] += h
				}
			}
			b.StopTimer()
			rtt := (rtt1 + writeRTT(b, admin, prefix+"-rtt", 300)) / 2
			b.ReportMetric(micros(rtt), "write-rtt-µs")
			rates := make([]float64, len(impls))
			for i, impl := range impls {
				rates[i] = float64(b.N) / elapsed[i].Seconds()
				realHold := held[i] / time.Duration(b.N)
				b.ReportMetric(rates[i], impl+"-grants/s")
				b.ReportMetric(rates[i]*(hold+rtt).Seconds(), impl+"-ratio")
				b.ReportMetric(micros(realHold), impl+"-hold-µs")
				b.ReportMetric(rates[i]*(realHold+rtt).Seconds(), impl+"-ratio-real-hold")
			}
			b.ReportMetric(rates[0]/rates[2], "fair/zklock")
			var fast int64
			for _, l := range fairLockers {
				fast += driverOf(l).fastGrants.Load()
			}
			b.ReportMetric(float64(fast-fast0)/float64(b.N), "fair-fast-grants/op")
		})
	}
}
