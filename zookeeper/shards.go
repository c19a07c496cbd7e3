package zookeeper

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// A Locker opened by URL spreads its names over up to `sessions` ZooKeeper
// sessions (default defaultSessions), one connection each, once it is
// busy. A server reads a connection's requests one at a time (its NIO
// selector hands the connection to a worker thread, which reads one
// request, and takes it back before the next), so requests pipelined on
// one connection queue behind each other's hand-offs. 32 goroutines cycling acquire+release over 10 000 names on
// one session made 3 000–4 400 grants/s where the floor, a connection per
// goroutine, made 6 600–6 800 and the same Locker code on 4 sessions 7 300
// (BenchmarkNames), at the same 2 requests per grant.
//
// The extra sessions are opened (in the background, once) when
// growAt attempts of the Locker are sending requests at once (waiting
// for a lock does not count): a Locker used by a few goroutines keeps
// one session. A name's attempts go to one session chosen by a hash of the
// name; which one does not matter for safety (each session is another
// client: its nodes, its watches, its leases, its session monitor, its
// janitor; the Locker closes them all on Close and nothing else), and a
// lock's nodes are in the same queue whichever session made them. When an
// extra session cannot be had within connect_timeout the Locker goes on
// with the sessions it has.
const (
	defaultSessions = 4
	maxSessions     = 16
	growAt          = 8
)

var shardSeed = maphash.MakeSeed()

// shards is what a Locker knows of its extra sessions.
type shards struct {
	url    *parsedURL   // the Locker's URL (nil: opened on a user's connection, or an extra session)
	home   *locker      // an extra session's first session (nil: l is the first)
	active atomic.Int32 // attempts sending requests now
	parked atomic.Int32 // attempts waiting for a lock now (tests)

	grown    atomic.Bool // the extra sessions were asked for (or cannot be)
	gmu      sync.Mutex
	stopping bool // Close has begun (guarded by gmu)
	extras   atomic.Pointer[[]*locker]
}

// shard returns the locker (session) that takes the attempts on name.
func (l *locker) shard(name string) *locker {
	xs := l.extras.Load()
	if xs == nil {
		return l
	}
	i := maphash.String(shardSeed, name) % uint64(len(*xs)+1)
	if i == 0 {
		return l
	}
	return (*xs)[i-1]
}

// busy adds d to the attempts sending requests, and asks for the extra
// sessions when they reach growAt.
func (l *locker) busy(d int32) {
	if l.url == nil {
		return
	}
	if l.active.Add(d) >= growAt && !l.grown.Load() {
		l.grow()
	}
}

// waiting marks one of l's attempts as waiting for a lock (on), or
// sending requests again: the Locker's first session counts them.
func (l *locker) waiting(on bool) {
	h := l
	if l.home != nil {
		h = l.home
	}
	if on {
		h.parked.Add(1)
		h.busy(-1)
	} else {
		h.busy(1)
		h.parked.Add(-1)
	}
}

// grow opens the extra sessions, once, in the background.
func (l *locker) grow() {
	n := l.url.sessions - 1
	l.gmu.Lock()
	defer l.gmu.Unlock()
	if l.stopping || l.grown.Swap(true) || n <= 0 {
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		var xs []*locker
		for range n {
			x, err := dialLocker(l.bgCtx, l.url, l.cfg, l.clog, l.parents)
			if err != nil {
				break
			}
			x.home = l
			xs = append(xs, x)
		}
		l.gmu.Lock()
		defer l.gmu.Unlock()
		if l.stopping || len(xs) == 0 {
			for _, x := range xs {
				_ = x.Close()
			}
			return
		}
		l.extras.Store(&xs)
	}()
}

// stopGrowing keeps Close and grow apart: no extra session is published
// after it.
func (l *locker) stopGrowing() {
	l.gmu.Lock()
	l.stopping = true
	l.gmu.Unlock()
}

// closeShards closes the extra sessions (after grow's goroutine ended).
func (l *locker) closeShards() {
	if xs := l.extras.Load(); xs != nil {
		var wg sync.WaitGroup
		for _, x := range *xs {
			wg.Go(func() { _ = x.Close() })
		}
		wg.Wait()
	}
}
