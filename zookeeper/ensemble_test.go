package zookeeper

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

// section is one critical section as its holder saw it: from the grant to
// the release, or to the moment the lease was reported lost.
type section struct {
	token      uint64
	start, end time.Time
	lost       bool
}

// TestEnsembleLeaderKill kills the leader of a 3-node ensemble while the
// lock is held and waited for. Checked: no two holders (successive tokens'
// sections never overlap: a holder learns of a loss before anyone else is
// granted), waiting resumes within the stated bound after the kill, and no
// lock znode is left at the end.
//
// The bound: the two surviving members elect a new leader (a few ticks of
// 500ms here) and every client reconnects within its session timeout, so
// the sessions, and with them the queue, survive; a grant then follows
// within session timeout + election time. We allow session timeout + 10s.
func TestEnsembleLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node ensemble")
	}
	e := testenv.ZooKeeperEnsemble(t, 3)
	admin := adminConn(t, e.Addrs...)
	prefix := testPrefix(t)
	const sessionTimeout = 6 * time.Second
	bound := sessionTimeout + 10*time.Second
	ctx := testenv.Context(t, 3*time.Minute)

	var (
		mu       sync.Mutex
		sections []section
		grants   atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	for range 3 {
		l := open(t, e.URL, prefix, "session_timeout=6s")
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					actx, cancel := context.WithTimeout(ctx, 40*time.Second)
					ls, err := l.Acquire(actx, "leader-kill", nil)
					cancel()
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					s := section{token: ls.Token(), start: time.Now()}
					grants.Add(1)
					select {
					case <-ls.Done():
						s.lost = true
					case <-time.After(20 * time.Millisecond):
					}
					s.end = time.Now()
					rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					if err := ls.Release(rctx); err != nil {
						t.Logf("release (token %d): %v", s.token, err)
					}
					cancel()
					mu.Lock()
					sections = append(sections, s)
					mu.Unlock()
				}
			}()
		}
	}

	time.Sleep(2 * time.Second)
	leader, err := e.Leader()
	if err != nil {
		t.Fatal(err)
	}
	before := grants.Load()
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed leader %s after %d grants", leader.Addr, before)
	var resumed time.Duration
	for {
		if grants.Load() > before+2 {
			resumed = time.Since(killed)
			break
		}
		if time.Since(killed) > bound {
			t.Fatalf("no grant within %v of the leader kill", bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("waiting resumed %v after the leader kill (bound %v)", resumed, bound)
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()

	slices.SortFunc(sections, func(a, b section) int {
		switch {
		case a.token < b.token:
			return -1
		case a.token > b.token:
			return 1
		}
		return 0
	})
	lost := 0
	for i, s := range sections {
		if s.lost {
			lost++
		}
		if i > 0 {
			p := sections[i-1]
			if s.token == p.token {
				t.Errorf("token %d granted twice", s.token)
			}
			if s.start.Before(p.end) {
				t.Errorf("two holders: token %d granted at %v, before token %d ended at %v", s.token, s.start, p.token, p.end)
			}
		}
	}
	t.Logf("%d critical sections, %d ended by a loss signal", len(sections), lost)
	// Every Locker is still open: the live sessions must hold no lock node.
	assertNoOrphans(t, admin, prefix)

}
