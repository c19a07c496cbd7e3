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
// it 1ms and waits 2ms before queueing again. One iteration is one grant.
// The ideal rate is 1/(hold + one write round trip): the holder's release
// (a delete) is the one write between two holds. The write round trip is
// the median setData round trip measured before and after, in the same run.
// Reported: grants/s, ideal-grants/s (with the nominal 1ms hold), their
// ratio, the mean time a hold really lasted (time.Sleep overshoots on a
// loaded machine) and ratio-real-hold, the ratio to 1/(that hold + the
// write round trip).
func BenchmarkHandoff(b *testing.B) {
	const (
		workers = 8
		hold    = time.Millisecond
		gap     = 2 * time.Millisecond
	)
	for _, fs := range syncModes() {
		srv := testenv.NewZooKeeper(b, &testenv.ZKOptions{ForceSync: fs})
		for _, impl := range []string{RecipeFair, RecipeBasic, "zklock"} {
			b.Run(syncName(fs)+"/"+impl, func(b *testing.B) {
				prefix := testPrefix(b)
				admin := adminConn(b, srv.Addr)
				ctx := testCtx(b, 10*time.Minute)
				type cycle func() (release func() error, err error)
				clients := make([]cycle, workers)
				var fairLockers []*dlock.Locker
				for w := range clients {
					if impl == "zklock" {
						zl := zk.NewLock(adminConn(b, srv.Addr), prefix+"/h", zk.WorldACL(zk.PermAll))
						clients[w] = func() (func() error, error) { return zl.Unlock, zl.Lock() }
						continue
					}
					l := open(b, srv.URL, prefix, "recipe="+impl)
					fairLockers = append(fairLockers, l)
					clients[w] = func() (func() error, error) {
						ls, err := l.Acquire(ctx, "h", nil)
						if err != nil {
							return nil, err
						}
						return func() error { return ls.Release(ctx) }, nil
					}
				}
				for _, c := range clients { // warm up; parents exist
					rel, err := c()
					if err != nil {
						b.Fatal(err)
					}
					_ = rel()
				}
				rtt1 := writeRTT(b, admin, prefix+"-rtt", 300)
				var grants, held atomic.Int64
				n := int64(b.N)
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for _, c := range clients {
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
				elapsed := time.Since(start)
				b.StopTimer()
				rtt := (rtt1 + writeRTT(b, admin, prefix+"-rtt", 300)) / 2
				rate := float64(b.N) / elapsed.Seconds()
				ideal := 1 / (hold + rtt).Seconds()
				realHold := time.Duration(held.Load() / n)
				b.ReportMetric(rate, "grants/s")
				b.ReportMetric(ideal, "ideal-grants/s")
				b.ReportMetric(rate/ideal, "ratio")
				b.ReportMetric(rate*(realHold+rtt).Seconds(), "ratio-real-hold")
				b.ReportMetric(micros(rtt), "write-rtt-µs")
				b.ReportMetric(micros(realHold), "hold-µs")
				if impl == RecipeFair {
					var fast, relist int64
					for _, l := range fairLockers {
						fast += driverOf(l).fastGrants.Load()
						relist += driverOf(l).waitRelists.Load()
					}
					b.ReportMetric(float64(fast)/float64(n), "fast-grants/op")
					b.ReportMetric(float64(relist)/float64(n), "relists-on-grant/op")
				}
			})
		}
	}
}
