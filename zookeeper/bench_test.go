package zookeeper

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/floor"
	"github.com/dlock-go/dlock/internal/stats"
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

// BenchmarkUncontended: one client acquires and releases a free lock, with
// dlock's fair recipe (one multi that creates the node and tells whether
// it is alone), its basic recipe, go-zookeeper's zk.Lock
// (create, getChildren, delete) and the hand-written floor of
// internal/floor with the fair recipe's guarantees (a multi that creates
// an ephemeral-sequential node and writes its parent, whose reply carries
// the czxid token; delete it), the four
// interleaved in each iteration so that they see the same server and the
// same machine noise. Reported: the p50 of each (µs), the ratios to
// zk.Lock's p50 and fair/floor. ns/op is the sum of the four.
func BenchmarkUncontended(b *testing.B) {
	for _, fs := range syncModes() {
		srv := testenv.NewZooKeeper(b, &testenv.ZKOptions{ForceSync: fs})
		b.Run(syncName(fs), func(b *testing.B) {
			prefix := testPrefix(b)
			fair := open(b, srv.URL, prefix, "")
			basic := open(b, srv.URL, prefix+"-basic", "recipe=basic")
			conn := adminConn(b, srv.Addr)
			zl := zk.NewLock(conn, prefix+"-zklock/u", zk.WorldACL(zk.PermAll))
			ctx := testenv.Context(b, 10*time.Minute)
			fl, err := floor.Open(ctx, srv.URL, "", nil)
			if err != nil {
				b.Fatal(err)
			}
			defer fl.Close()
			opFloor := func() error { return fl.Cycle(ctx, prefix+"-floor") }
			opFair, opBasic := acquireRelease(ctx, fair), acquireRelease(ctx, basic)
			opZK := func() error {
				if err := zl.Lock(); err != nil {
					return err
				}
				return zl.Unlock()
			}
			ops := []func() error{opFair, opBasic, opZK, opFloor}
			meds := testenv.Interleaved(b, 20, ops...) // parents exist, JIT warm
			f, ba, z, fp := meds[0], meds[1], meds[2], meds[3]
			b.ReportMetric(stats.Micros(f), "fair-p50-µs")
			b.ReportMetric(stats.Micros(ba), "basic-p50-µs")
			b.ReportMetric(stats.Micros(z), "zklock-p50-µs")
			b.ReportMetric(stats.Micros(fp), "floor-p50-µs")
			b.ReportMetric(float64(f)/float64(fp), "fair/floor")
			b.ReportMetric(float64(f)/float64(z), "fair/zklock")
			b.ReportMetric(float64(ba)/float64(z), "basic/zklock")
		})
	}
}

// acquireRelease returns one uncontended cycle on l.
func acquireRelease(ctx context.Context, l *dlock.Locker) func() error {
	return func() error { return use(ctx, l, "u") }
}

// use acquires name on l and releases it.
func use(ctx context.Context, l *dlock.Locker, name string) error {
	ls, err := l.Acquire(ctx, name, nil)
	if err != nil {
		return err
	}
	return ls.Release(ctx)
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
			ctx := testenv.Context(b, 30*time.Minute)
			write, err := floor.OpenWriteRTT(ctx, srv.URL)
			if err != nil {
				b.Fatal(err)
			}
			defer write.Close()
			writeRTT := func() time.Duration {
				rtt, err := write.Median(ctx, 300)
				if err != nil {
					b.Fatal(err)
				}
				return rtt
			}
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
			rtt1 := writeRTT()
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
			rtt := (rtt1 + writeRTT()) / 2
			b.ReportMetric(stats.Micros(rtt), "write-rtt-µs")
			rates := make([]float64, len(impls))
			for i, impl := range impls {
				rates[i] = float64(b.N) / elapsed[i].Seconds()
				realHold := held[i] / time.Duration(b.N)
				b.ReportMetric(rates[i], impl+"-grants/s")
				b.ReportMetric(rates[i]*(hold+rtt).Seconds(), impl+"-ratio")
				b.ReportMetric(stats.Micros(realHold), impl+"-hold-µs")
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

// holdMany opens a Locker with recipe and takes n names with opts; they
// are released when the benchmark ends.
func holdMany(b *testing.B, ctx context.Context, url, recipe string, n int, opts *dlock.AcquireOptions) (*locker, []*dlock.Lease) {
	b.Helper()
	l := open(b, url, testPrefix(b), "recipe="+recipe)
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		ls, err := l.Acquire(ctx, "h"+strconv.Itoa(i), opts)
		if err != nil {
			b.Fatal(err)
		}
		leases[i] = ls
	}
	b.Cleanup(func() {
		for _, ls := range leases {
			if err := ls.Release(ctx); err != nil {
				b.Error(err)
			}
		}
	})
	return driverOf(l), leases
}

// BenchmarkHeldLeases: one Locker holds 1 000 leases (each recipe) and an
// op refreshes every one of them once, all at once (their refreshes share
// round trips). Reported: requests sent per refresh (pings aside), and
// ns/op, B/op and allocs/op per 1 000 refreshes. Profile it with
// -cpuprofile.
func BenchmarkHeldLeases(b *testing.B) {
	const n = 1000
	srv := testenv.ZooKeeper(b)
	for _, recipe := range []string{RecipeFair, RecipeBasic} {
		b.Run(recipe, func(b *testing.B) {
			ctx := testenv.Context(b, 10*time.Minute)
			d, leases := holdMany(b, ctx, srv.URL, recipe, n, nil)
			time.Sleep(10 * lazyWatch) // the lazy watches are set
			sent := d.s.tr.sent.Load()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var wg sync.WaitGroup
				for _, ls := range leases {
					wg.Go(func() {
						if err := ls.Refresh(ctx); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			b.StopTimer()
			b.ReportMetric(float64(d.s.tr.sent.Load()-sent)/float64(b.N*n), "reqs/refresh")
		})
	}
}

// BenchmarkKeepAlive: one Locker holds 1 000 leases with a TTL of 3s, then
// of 30s (the default), and an op is one refresh period (TTL/3) of its
// keep-alive, after a first one. Reported: requests sent per lease per
// period (pings aside). dlockbench's scale curve (-workload scale)
// measures the CPU it costs.
func BenchmarkKeepAlive(b *testing.B) {
	const n = 1000
	srv := testenv.ZooKeeper(b)
	for _, ttl := range []time.Duration{3 * time.Second, dlock.DefaultTTL} {
		for _, recipe := range []string{RecipeFair, RecipeBasic} {
			b.Run(fmt.Sprintf("ttl=%v/%s", ttl, recipe), func(b *testing.B) {
				ctx := testenv.Context(b, 10*time.Minute)
				d, _ := holdMany(b, ctx, srv.URL, recipe, n, &dlock.AcquireOptions{TTL: ttl})
				time.Sleep(ttl / 3) // the first refreshes set their watches
				sent := d.s.tr.sent.Load()
				b.ResetTimer()
				time.Sleep(time.Duration(b.N) * ttl / 3)
				b.StopTimer()
				b.ReportMetric(float64(d.s.tr.sent.Load()-sent)/float64(b.N*n), "reqs/lease/period")
			})
		}
	}
}

// BenchmarkNames is the scale workload's names point, split open: 32
// goroutines each cycle acquire+release over their own share of 10 000
// names (goroutine g: names g, g+32, …), on one Locker of each recipe, on
// a fair Locker held to one session (sessions=1) and on the fenced floor
// of internal/floor with a connection per goroutine, the four alternating
// in slices of 200ms, 5 slices each after a warm-up slice that creates the
// parents. Reported, medians of the slices, per
// side: grants/s, requests the server received per grant (mntr's
// zk_packets_received) and client CPU per grant (getrusage of this
// process: the server is another process). Run with
//
//	go test -run '^$' -bench Names -benchtime 1x ./zookeeper/
func BenchmarkNames(b *testing.B) {
	const (
		clients = 32
		names   = 10000
		slice   = 200 * time.Millisecond
	)
	srv := testenv.NewZooKeeper(b, &testenv.ZKOptions{ForceSync: false})
	ctx := testenv.Context(b, 10*time.Minute)
	prefix := testPrefix(b)
	type side struct {
		name  string
		cycle func(g int, name string) error
	}
	var sides []side
	for _, recipe := range []string{RecipeFair, RecipeBasic} {
		l := open(b, srv.URL, prefix+"-"+recipe, "recipe="+recipe)
		sides = append(sides, side{recipe, func(_ int, name string) error { return use(ctx, l, name) }})
	}
	one := open(b, srv.URL, prefix+"-fair", "sessions=1")
	sides = append(sides, side{"fair-sessions=1", func(_ int, name string) error { return use(ctx, one, name) }})
	floors := make([]*floor.Lock, clients)
	for g := range floors {
		fl, err := floor.Open(ctx, srv.URL, "", nil)
		if err != nil {
			b.Fatal(err)
		}
		defer fl.Close()
		floors[g] = fl
	}
	sides = append(sides, side{"floor", func(g int, name string) error { return floors[g].Cycle(ctx, prefix+"-floor-"+name) }})
	run := func(s side, d time.Duration) (rate, recv, cpu float64) {
		r0, c0 := mntr(b, ctx, srv.Addr, "zk_packets_received"), testCPU()
		var grants atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		stop := start.Add(d)
		for g := range clients {
			wg.Go(func() {
				for k := g; time.Now().Before(stop); k += clients {
					if err := s.cycle(g, strconv.Itoa(k%names)); err != nil {
						b.Error(err)
						return
					}
					grants.Add(1)
				}
			})
		}
		wg.Wait()
		el, c1 := time.Since(start), testCPU()
		n := float64(grants.Load())
		r1 := mntr(b, ctx, srv.Addr, "zk_packets_received")
		return n / el.Seconds(), float64(r1-r0-1) / n, stats.Micros(c1-c0) / n
	}
	for _, s := range sides {
		run(s, 2*time.Second) // parents exist, JIT warm
	}
	res := make([][3][]float64, len(sides))
	for b.Loop() {
		for i := range 5 {
			for j := range sides {
				k := (i + j) % len(sides)
				r, q, c := run(sides[k], slice)
				res[k][0], res[k][1], res[k][2] = append(res[k][0], r), append(res[k][1], q), append(res[k][2], c)
			}
		}
	}
	med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
	for i, s := range sides {
		b.ReportMetric(med(res[i][0]), s.name+"-grants/s")
		b.ReportMetric(med(res[i][1]), s.name+"-reqs/grant")
		b.ReportMetric(med(res[i][2]), s.name+"-cpu-µs/grant")
	}
}

// testCPU is the CPU time this process has used, user and system.
func testCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
