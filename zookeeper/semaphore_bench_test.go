package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testenv"
)

// waitChildWatch is the design waitPermit is compared with: every waiter
// keeps a child watch on the parent and lists it again at each change
// (an arrival or a departure), as a waiter would that watched "the
// children" instead of the nodes ahead.
func waitChildWatch(ctx context.Context, a *attempt) (driver.Lease, error) {
	for {
		r, err := call(ctx, func() (childList, error) {
			k, st, ch, err := a.l.conn.ChildrenW(a.parent)
			return childList{k, st, ch}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil, errRequeue
		}
		if err != nil {
			return nil, err
		}
		v, ok := a.view(r)
		if !ok {
			return nil, errRequeue
		}
		if len(v.below) < a.permits {
			return a.grantWaited(ctx, 0, nil)
		}
		select {
		case <-r.ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// mntr returns a counter of the server's mntr answer.
func mntr(b *testing.B, ctx context.Context, addr, key string) int64 {
	out, err := testenv.ZKCommand(ctx, addr, "mntr")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "\t"); ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("mntr: no %s", key)
	return 0
}

// BenchmarkSemaphoreContended compares the waiter's window of N watches
// (waitPermit) with a child watch per waiter (waitChildWatch): 8 or 32
// Lockers, one goroutine each, take and release a permit of a semaphore of N in a
// loop (holding it 1ms) for 400ms slices, the two designs alternating
// slice by slice, 5 slices each. Reported, medians of the slices: grants
// per second, and requests the server received per grant (mntr's
// zk_packets_received, which counts pings too: a few per slice) and
// packets it sent per grant (replies and watch notifications), an exact
// measure of the wake-ups. Run with
//
//	go test -run '^$' -bench SemaphoreContended -benchtime 1x ./zookeeper/
func BenchmarkSemaphoreContended(b *testing.B) {
	srv := testenv.NewZooKeeper(b, &testenv.ZKOptions{ForceSync: false})
	for _, c := range []struct{ clients, permits int }{{8, 2}, {8, 4}, {32, 2}, {32, 4}} {
		n := c.permits
		b.Run(fmt.Sprintf("clients=%d/permits=%d", c.clients, n), func(b *testing.B) {
			ctx := testenv.Context(b, 5*time.Minute)
			prefix := testPrefix(b)
			var sems []*dlock.Semaphore
			for range c.clients {
				sems = append(sems, semaphore(b, open(b, srv.URL, prefix, ""), "bench", n))
			}
			slice := func(herd bool) (rate, recv, sent float64) {
				if herd {
					testWaitPermit = waitChildWatch
				} else {
					testWaitPermit = nil
				}
				defer func() { testWaitPermit = nil }()
				r0, s0 := mntr(b, ctx, srv.Addr, "zk_packets_received"), mntr(b, ctx, srv.Addr, "zk_packets_sent")
				var grants atomic.Int64
				var wg sync.WaitGroup
				stop := time.Now().Add(400 * time.Millisecond)
				for _, sem := range sems {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(stop) {
							p, err := sem.Acquire(ctx, &dlock.AcquireOptions{NoKeepAlive: true})
							if err != nil {
								b.Error(err)
								return
							}
							grants.Add(1)
							time.Sleep(time.Millisecond)
							if err := p.Release(ctx); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				start := time.Now()
				wg.Wait()
				el := time.Since(start)
				g := float64(grants.Load())
				r1, s1 := mntr(b, ctx, srv.Addr, "zk_packets_received"), mntr(b, ctx, srv.Addr, "zk_packets_sent")
				// Each mntr is one more packet received and sent.
				return g / el.Seconds(), float64(r1-r0-1) / g, float64(s1-s0-1) / g
			}
			slice(false) // warm: parents exist, JIT warm
			slice(true)
			var wr, wi, ws, hr, hi, hs []float64
			for b.Loop() {
				for range 5 {
					r, i, s := slice(false)
					wr, wi, ws = append(wr, r), append(wi, i), append(ws, s)
					r, i, s = slice(true)
					hr, hi, hs = append(hr, r), append(hi, i), append(hs, s)
				}
			}
			med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
			b.ReportMetric(med(wr), "window-grants/s")
			b.ReportMetric(med(hr), "children-grants/s")
			b.ReportMetric(med(wi), "window-recv/grant")
			b.ReportMetric(med(hi), "children-recv/grant")
			b.ReportMetric(med(ws), "window-sent/grant")
			b.ReportMetric(med(hs), "children-sent/grant")
		})
	}
}
