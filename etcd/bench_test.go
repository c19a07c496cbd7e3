package etcd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/stats"
	"github.com/dlock-go/dlock/internal/testenv"
)

// BenchmarkUncontended: one client acquires and releases a free lock with
// dlock's etcd driver (TTL 10s), with the driver alone (its Acquire and
// Release called directly: what the portable layer adds is the
// difference), with etcd's own concurrency.Mutex (on a
// session created beforehand, as its users do), with the floor of the same
// guarantees (grant a lease of the TTL, put-if-absent under it reading the
// queue's lowest create revision, delete), and a linearizable Get (one raw
// round trip), the five interleaved in each iteration so that they see
// the same server and noise. Run with a fixed count, e.g.
//
//	go test -run '^$' -bench Uncontended -benchtime 500x -count 5 ./
//
// Each sub-benchmark starts its own one-member server: fsync on (etcd's
// default) and --unsafe-no-fsync. Reported: p50 of each (µs) and the
// ratios dlock/floor, dlock/mutex and driver/mutex. ns/op is the sum of
// the five.
func BenchmarkUncontended(b *testing.B) {
	for _, nofsync := range []bool{false, true} {
		srv := testenv.NewEtcd(b, &testenv.EtcdOptions{UnsafeNoFsync: nofsync})
		b.Run("fsync="+srv.Settings["fsync"], func(b *testing.B) {
			ctx := testenv.Context(b, 10*time.Minute)
			prefix := fmt.Sprintf("/dlockbench/%d", time.Now().UnixNano())
			l, cli, sess := openPeers(b, srv, prefix)
			mu := concurrency.NewMutex(sess, prefix+"-mutex/u")
			opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
			drv := newLocker(cli, false, prefix+"-driver")
			defer drv.Close()
			req := driver.Request{Name: "u", TTL: opts.TTL}
			ops := []func() error{
				func() error { // dlock
					ls, err := l.Acquire(ctx, "u", opts)
					if err != nil {
						return err
					}
					return ls.Release(ctx)
				},
				func() error { // concurrency.Mutex
					if err := mu.Lock(ctx); err != nil {
						return err
					}
					return mu.Unlock(ctx)
				},
				func() error { // floor
					g, err := cli.Grant(ctx, 10)
					if err != nil {
						return err
					}
					q := prefix + "-floor/u/"
					key := fmt.Sprintf("%s%016x", q, int64(g.ID))
					if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
						Then(clientv3.OpPut(key, "", clientv3.WithLease(g.ID)), clientv3.OpGet(q, clientv3.WithFirstCreate()...)).Commit(); err != nil {
						return err
					}
					_, err = cli.Delete(ctx, key)
					return err
				},
				func() error { // raw round trip
					_, err := cli.Get(ctx, prefix+"-rtt")
					return err
				},
				func() error { // the driver alone
					ls, err := drv.Acquire(ctx, req)
					if err != nil {
						return err
					}
					return ls.Release(ctx)
				},
			}
			meds := testenv.Interleaved(b, 20, ops...)
			d, m, f, r, dr := meds[0], meds[1], meds[2], meds[3], meds[4]
			b.ReportMetric(stats.Micros(dr), "driver-p50-µs")
			b.ReportMetric(float64(dr)/float64(m), "driver/mutex")
			b.ReportMetric(stats.Micros(d), "dlock-p50-µs")
			b.ReportMetric(stats.Micros(m), "mutex-p50-µs")
			b.ReportMetric(stats.Micros(f), "floor-p50-µs")
			b.ReportMetric(stats.Micros(r), "get-p50-µs")
			b.ReportMetric(float64(d)/float64(f), "dlock/floor")
			b.ReportMetric(float64(d)/float64(m), "dlock/mutex")
		})
	}
}

// BenchmarkRequests counts the requests the server handles per grant (from
// its /metrics: unary calls and stream messages by gRPC method), exact
// figures where times are noisy: uncontended acquire+release by one
// Locker (TTL 10s), and a handoff of 8 Lockers each holding 1ms (the
// dlockbench workload "handoff w=8 hold=1ms"). Beside them, the CPU
// time per grant of the clients (this process) and of the server
// (client-µs/grant, server-µs/grant; on Linux), which the machine's two
// sides share. Run with e.g.
//
//	go test -run '^$' -bench Requests -benchtime 400x ./
func BenchmarkRequests(b *testing.B) {
	srv := testenv.NewEtcd(b, &testenv.EtcdOptions{UnsafeNoFsync: true})
	for _, w := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("lockers=%d", w), func(b *testing.B) {
			ctx := testenv.Context(b, 10*time.Minute)
			prefix := fmt.Sprintf("/dlockbench-req/%d", time.Now().UnixNano())
			hold := time.Duration(0)
			if w > 1 {
				hold = time.Millisecond
			}
			lockers := openLockers(b, srv, prefix, w)
			before := etcdRequests(b, srv.Addr)
			cli0, srv0 := selfCPU(), procCPU(srv.Pid())
			handoff(ctx, b, lockers, b.N, hold, nil)
			b.StopTimer()
			cli1, srv1 := selfCPU(), procCPU(srv.Pid())
			after := etcdRequests(b, srv.Addr)
			if cli1 > 0 && srv1 > 0 {
				b.ReportMetric(stats.Micros(cli1-cli0)/float64(b.N), "client-µs/grant")
				b.ReportMetric(stats.Micros(srv1-srv0)/float64(b.N), "server-µs/grant")
			}
			total := 0.0
			for m, n := range after {
				if d := n - before[m]; d > 0 && m != "Status" {
					b.ReportMetric(d/float64(b.N), m+"/grant")
					total += d
				}
			}
			b.ReportMetric(total/float64(b.N), "requests/grant")
		})
	}
}

// openLockers opens n Lockers on srv under prefix, each on a client of
// its own (as dlockbench's workers), closed when tb ends.
func openLockers(tb testing.TB, srv *testenv.Server, prefix string, n int) []*dlock.Locker {
	tb.Helper()
	ctx := testenv.Context(tb, time.Minute)
	lockers := make([]*dlock.Locker, n)
	for i := range lockers {
		l, err := dlock.Open(ctx, srv.URL+prefix)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { l.Close() })
		lockers[i] = l
	}
	return lockers
}

// use is one grant of a handoff: when Acquire returned, and when the
// Release that followed the hold began and returned.
type use struct{ acquired, releasing, released time.Time }

// handoff makes n grants of the name "r" (TTL 10s) among lockers, each
// held for hold, and calls record (if not nil) with each grant's times.
func handoff(ctx context.Context, tb testing.TB, lockers []*dlock.Locker, n int, hold time.Duration, record func(use)) {
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for _, l := range lockers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				ls, err := l.Acquire(ctx, "r", opts)
				if err != nil {
					tb.Error(err)
					return
				}
				u := use{acquired: time.Now()}
				testenv.Hold(hold)
				u.releasing = time.Now()
				if err := ls.Release(ctx); err != nil {
					tb.Error(err)
					return
				}
				if u.released = time.Now(); record != nil {
					record(u)
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkHandoffStalls finds the handoff's stalls: in a handoff of 8
// Lockers each holding 1ms (dlockbench's "handoff w=8 hold=1ms"), the
// time from a release's start to the next holder's return (the gap), and
// per 1 000 grants the gaps over 20ms, split by what they waited for: the
// release's delete itself (its Release took over 5ms: the server was slow
// to commit it, a disk or CPU stall that every client of the server
// shares), or the next holder's watch event after a prompt delete. The
// latter is etcd's (3.4): a watch created from the current revision
// (start revision 0) reads that revision, then registers; a write applied
// in between makes it an "unsynced" watch, whose events the server sends
// only at its next catch-up of such watches, every 100ms (a watch from a
// past revision, as concurrency.Mutex starts, is always one). Each wait
// creates its watch, so the handoff meets it whenever a creation races a
// write. It also reports the holds' p50 (hold-p50-µs): a hold sleeps in
// the kernel (testenv.Hold), as dlockbench's do, since a time.Sleep(1ms)
// ended a millisecond after any message that woke the process during it;
// a hold that still wakes late shows CPU the clients or the server took.
// Run with e.g.
//
//	go test -run '^$' -bench HandoffStalls -benchtime 5000x ./
func BenchmarkHandoffStalls(b *testing.B) {
	for _, nofsync := range []bool{false, true} {
		srv := testenv.NewEtcd(b, &testenv.EtcdOptions{UnsafeNoFsync: nofsync})
		b.Run("fsync="+srv.Settings["fsync"], func(b *testing.B) {
			ctx := testenv.Context(b, 10*time.Minute)
			lockers := openLockers(b, srv, fmt.Sprintf("/dlockbench-stalls/%d", time.Now().UnixNano()), 8)
			var mu sync.Mutex
			var uses []use
			handoff(ctx, b, lockers, b.N, time.Millisecond, func(u use) {
				mu.Lock()
				uses = append(uses, u)
				mu.Unlock()
			})
			b.StopTimer()
			slices.SortFunc(uses, func(x, y use) int { return x.acquired.Compare(y.acquired) })
			gaps := make([]time.Duration, 0, len(uses))
			var slowDelete, lateEvent int
			for i := 1; i < len(uses); i++ {
				prev := uses[i-1]
				gap := uses[i].acquired.Sub(prev.releasing)
				gaps = append(gaps, gap)
				switch {
				case gap <= 20*time.Millisecond:
				case prev.released.Sub(prev.releasing) > 5*time.Millisecond:
					slowDelete++
				default:
					lateEvent++
				}
			}
			if len(gaps) == 0 {
				return
			}
			slices.Sort(gaps)
			holds := make([]time.Duration, len(uses))
			for i, u := range uses {
				holds[i] = u.releasing.Sub(u.acquired)
			}
			slices.Sort(holds)
			b.ReportMetric(stats.Micros(holds[len(holds)/2]), "hold-p50-µs")
			per := 1000 / float64(len(gaps))
			b.ReportMetric(stats.Micros(gaps[len(gaps)/2]), "gap-p50-µs")
			b.ReportMetric(stats.Micros(gaps[len(gaps)*99/100]), "gap-p99-µs")
			b.ReportMetric(float64(slowDelete)*per, "slow-delete/1k")
			b.ReportMetric(float64(lateEvent)*per, "late-event/1k")
		})
	}
}

// etcdRequests reads the server's counts of unary calls and stream
// messages received, by gRPC method.
func etcdRequests(b testing.TB, addr string) map[string]float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	counts := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `grpc_method="`)
		method, rest, _ := strings.Cut(rest, `"`)
		_, val, _ := strings.Cut(rest, "} ")
		n, _ := strconv.ParseFloat(strings.TrimSpace(val), 64)
		counts[method] += n
	}
	return counts
}

// selfCPU is this process's CPU time (user and system) so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is process pid's CPU time so far, from /proc (0 where there is
// none: not Linux, no such process).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// pid (comm) state ... utime(14th field) stime(15th); comm may hold spaces.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(u+st) * time.Second / clkTck
}

// BenchmarkHeldLeases holds 1 000 leases on one Locker and reports the
// client's CPU time and the server's requests per refresh over whole
// refresh periods (the portable layer refreshes each lease every third of
// its TTL): at a TTL of 3s, the dlockbench curve "scale leases=1000" with
// exact counts beside it (three periods), and at the default TTL of 30s,
// where refreshes come ten times less often and so fewer share a batch
// (one period, 10s). Run with e.g.
//
//	go test -run '^$' -bench HeldLeases -benchtime 1x ./
func BenchmarkHeldLeases(b *testing.B) {
	const n = 1000
	srv := testenv.NewEtcd(b, &testenv.EtcdOptions{UnsafeNoFsync: true})
	for _, ttl := range []time.Duration{3 * time.Second, dlock.DefaultTTL} {
		b.Run("ttl="+ttl.String(), func(b *testing.B) {
			periods := max(1, int(9*time.Second/ttl))
			ctx := testenv.Context(b, 10*time.Minute)
			l, err := dlock.Open(ctx, srv.URL+fmt.Sprintf("/dlockbench-held/%d", time.Now().UnixNano()))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			opts := &dlock.AcquireOptions{TTL: ttl}
			for range b.N {
				leases := make([]*dlock.Lease, n)
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Go(func() {
						for i := g; i < n; i += 8 {
							ls, err := l.Acquire(ctx, strconv.Itoa(i), opts)
							if err != nil {
								b.Error(err)
								return
							}
							leases[i] = ls
						}
					})
				}
				wg.Wait()
				time.Sleep(300 * time.Millisecond)
				before := etcdRequests(b, srv.Addr)
				c0 := selfCPU()
				time.Sleep(time.Duration(periods) * ttl / 3)
				c1 := selfCPU()
				after := etcdRequests(b, srv.Addr)
				refreshes := float64(periods * n)
				b.ReportMetric(stats.Micros(c1-c0)/refreshes, "client-µs/refresh")
				for m, v := range after {
					if d := v - before[m]; d > 0 && m != "Status" {
						b.ReportMetric(d/refreshes, m+"/refresh")
					}
				}
				for _, ls := range leases {
					if ls != nil {
						if ls.Err() != nil {
							b.Errorf("lease lost while held: %v", ls.Err())
						}
						_ = ls.Release(ctx)
					}
				}
			}
		})
	}
}

// BenchmarkLockUse counts, per uncontended acquire+release of one name
// (TTL 10s), the allocations (-benchmem), the requests the server handles
// by gRPC method and the client's CPU time, of dlock's etcd driver and of
// etcd's own concurrency.Mutex (a session made beforehand, a NewMutex per
// use, as its users write it): exact counts beside BenchmarkUncontended's
// times. Run with e.g.
//
//	go test -run '^$' -bench LockUse -benchmem -benchtime 2000x ./
func BenchmarkLockUse(b *testing.B) {
	srv := testenv.NewEtcd(b, &testenv.EtcdOptions{UnsafeNoFsync: true})
	ctx := testenv.Context(b, 10*time.Minute)
	prefix := fmt.Sprintf("/dlockbench-use/%d", time.Now().UnixNano())
	l, _, sess := openPeers(b, srv, prefix)
	opts := &dlock.AcquireOptions{TTL: 10 * time.Second}
	for _, c := range []struct {
		name string
		use  func() error
	}{
		{"dlock", func() error {
			ls, err := l.Acquire(ctx, "u", opts)
			if err != nil {
				return err
			}
			return ls.Release(ctx)
		}},
		{"mutex", func() error {
			m := concurrency.NewMutex(sess, prefix+"-mutex/u")
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range 20 { // warm: streams open, a spare kept
				if err := c.use(); err != nil {
					b.Fatal(err)
				}
			}
			before, c0, s0 := etcdRequests(b, srv.Addr), selfCPU(), procCPU(srv.Pid())
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := c.use(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			c1, s1, after := selfCPU(), procCPU(srv.Pid()), etcdRequests(b, srv.Addr)
			if c1 > 0 && s1 > 0 {
				b.ReportMetric(stats.Micros(c1-c0)/float64(b.N), "client-µs/op")
				b.ReportMetric(stats.Micros(s1-s0)/float64(b.N), "server-µs/op")
			}
			for m, n := range after {
				if d := n - before[m]; d > 0 && m != "Status" {
					b.ReportMetric(d/float64(b.N), m+"/op")
				}
			}
		})
	}
}

// openPeers opens, on srv under prefix, the uncontended benchmarks' two
// contenders on one etcd client: a dlock Locker, and a concurrency
// Session of 10s for concurrency.Mutex; all closed when tb ends. One
// client, one connection: interleaved op by op, a Locker on a connection
// of its own found it idle, colder, at each of its turns (30-70µs a lock
// use, more with fsync).
func openPeers(tb testing.TB, srv *testenv.Server, prefix string) (*dlock.Locker, *clientv3.Client, *concurrency.Session) {
	tb.Helper()
	cli := newClient(tb, srv.Addr)
	l, err := OpenLocker(cli, &Options{Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sess.Close() })
	return l, cli, sess
}

// newClient opens an etcd client to the member at addr, closed when tb
// ends.
func newClient(tb testing.TB, addr string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}
