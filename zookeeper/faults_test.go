package zookeeper

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/netproxy"
	"github.com/dlock-go/dlock/internal/testenv"
)

// newProxy returns a TCP proxy to a real ZooKeeper server (every request
// reaches it, and it answers), which reads what the client sends packet
// by packet so that LoseReply can match one request.
func newProxy(t testing.TB, target string) *netproxy.Proxy {
	t.Helper()
	p := netproxy.ForTest(t, target)
	p.Frame(packets)
	return p
}

// packets cuts a ZooKeeper client's stream into packets: a 4-byte
// big-endian length, then the body (xid, op, ...).
func packets(data []byte, atEOF bool) (int, []byte, error) {
	if len(data) >= 4 {
		if n := 4 + int(binary.BigEndian.Uint32(data)); len(data) >= n {
			return n, data[:n], nil
		}
	}
	if atEOF && len(data) > 0 {
		return 0, nil, io.ErrUnexpectedEOF
	}
	return 0, nil, nil
}

// createOf matches a create, create2 or multi request packet whose bytes
// contain marker.
func createOf(marker string) func(pkt []byte) bool {
	return func(pkt []byte) bool {
		if len(pkt) < 12 {
			return false
		}
		switch op := int32(binary.BigEndian.Uint32(pkt[8:12])); op {
		case 1, 14, 15: // create, multi, create2
			return bytes.Contains(pkt[12:], []byte(marker))
		}
		return false
	}
}

// driverOf returns the zookeeper driver under a Locker.
func driverOf(l *dlock.Locker) *locker { return l.Driver().(*locker) }

// TestLostCreateReply: the server applies the create but its reply is lost
// with the connection. The retry must find its node by GUID, not create a
// second one that would be orphaned.
func TestLostCreateReply(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		px := newProxy(t, srv.Addr)
		l := open(t, "zk://"+px.Addr(), prefix, "recipe="+recipe)
		ctx := testenv.Context(t, 30*time.Second)
		// Make the parents exist first, so the lost request is the lock's own create.
		warm, err := l.Acquire(ctx, "lostreply", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = warm.Release(ctx)
		dials := driverOf(l).s.tr.dials.Load()

		lost := px.LoseReply(createOf(escapeName("lostreply")))
		ls, err := l.Acquire(ctx, "lostreply", nil)
		if err != nil {
			t.Fatal(err)
		}
		dropped := false
		select {
		case <-lost:
			dropped = true
		default:
		}
		if !dropped || driverOf(l).s.tr.dials.Load() == dials {
			t.Fatalf("the fault did not happen (reply lost %v, dials %d→%d)", dropped, dials, driverOf(l).s.tr.dials.Load())
		}
		if r, s := driverOf(l).recovered.Load(), driverOf(l).strays.Load(); r != 1 || s != 0 {
			t.Errorf("recovered by GUID %d times, %d stray nodes; want 1 and 0", r, s)
		}
		k := kids(t, admin, prefix, "lostreply")
		if len(k) != 1 {
			t.Errorf("children after a lost create reply: %v, want exactly the holder", k)
		}
		expectHeld(t, ctx, open(t, srv.URL, prefix, "recipe="+recipe), "lostreply", "after a lost create reply")
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestDisconnectKeepsSession: a connection cut shorter than the session
// timeout keeps the session, hence the lease.
func TestDisconnectKeepsSession(t *testing.T) {
	srv, admin, prefix, ctx := setup(t, 30*time.Second)
	l := open(t, srv.URL, prefix, "session_timeout=4s")
	other := open(t, srv.URL, prefix, "")
	ls, err := l.Acquire(ctx, "d", nil)
	if err != nil {
		t.Fatal(err)
	}
	sid := driverOf(l).conn.SessionID()
	driverOf(l).s.tr.cut()
	time.Sleep(time.Second)
	select {
	case <-ls.Done():
		t.Fatalf("lease ended after a short disconnection: %v", ls.Err())
	default:
	}
	if got := driverOf(l).conn.SessionID(); got != sid {
		t.Fatalf("session changed %x → %x", sid, got)
	}
	if err := ls.Refresh(ctx); err != nil {
		t.Errorf("refresh after reconnect: %v", err)
	}
	expectHeld(t, ctx, other, "d", "after a short disconnection")
	if err := ls.Release(ctx); err != nil {
		t.Error(err)
	}
	assertNoOrphans(t, admin, prefix)
}

// TestSessionExpiryByPause stalls the holder's connection past the session
// timeout: its lease must end before the server expires the session and
// deletes the node (so before anyone else can be granted).
func TestSessionExpiryByPause(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		px := newProxy(t, srv.Addr)
		const timeout = 2 * time.Second
		l := open(t, "zk://"+px.Addr(), prefix, "session_timeout=2s&recipe="+recipe)
		other := open(t, srv.URL, prefix, "recipe="+recipe)
		ctx := testenv.Context(t, 60*time.Second)
		if got := driverOf(l).s.sessionTimeout(); got != timeout {
			t.Fatalf("negotiated session timeout %v, want %v", got, timeout)
		}
		ls, err := l.Acquire(ctx, "e", nil)
		if err != nil {
			t.Fatal(err)
		}
		k := kids(t, admin, prefix, "e")
		if len(k) != 1 {
			t.Fatalf("children %v", k)
		}
		node := prefix + "/" + escapeName("e") + "/" + k[0]
		// The lease's refreshes share round trips when the stall begins:
		// the session monitor must end it in time all the same.
		untilArmed(t, ctx, ls, leaseOf(t, l))

		paused := time.Now()
		px.Pause()
		granted := make(chan time.Time, 1)
		go func() {
			l2, err := other.Acquire(ctx, "e", nil)
			if err != nil {
				t.Error(err)
				granted <- time.Time{}
				return
			}
			granted <- time.Now()
			_ = l2.Release(ctx)
		}()
		select {
		case <-ls.Done():
		case <-time.After(2 * timeout):
			t.Fatal("lease did not end while the session was expiring")
		}
		lost := time.Now()
		exists, _, err := admin.Exists(node)
		if err != nil {
			t.Fatal(err)
		}
		if !exists {
			t.Errorf("the server had already deleted the node when the lease ended (%v after the pause)", lost.Sub(paused))
		}
		if !errors.Is(ls.Err(), dlock.ErrLockLost) {
			t.Errorf("lease err %v", ls.Err())
		}
		if err := ls.Refresh(ctx); err == nil {
			t.Error("refresh succeeded after the lease ended")
		}
		g := <-granted
		if g.IsZero() {
			t.FailNow()
		}
		if !g.After(lost) {
			t.Errorf("another client was granted at %v, before the holder learned of the loss at %v", g, lost)
		}
		t.Logf("lease ended %v after the pause, the other client was granted %v after it", lost.Sub(paused), g.Sub(lost))
		px.Resume()
		// The old session is gone; the Locker works on in a new one.
		ls2, err := l.Acquire(ctx, "e", nil)
		if err != nil {
			t.Fatal(err)
		}
		if ls2.Token() <= ls.Token() {
			t.Errorf("token %d not above %d", ls2.Token(), ls.Token())
		}
		if err := ls2.Release(ctx); err != nil {
			t.Errorf("release in the new session: %v", err)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestLostLeaseNodeDeleted: a lease reported lost while its session in
// fact lives on (here: the loss margin is made huge, and the connection
// stalls for a while shorter than the session timeout) must not leave its
// node behind to block everyone until the session ends.
func TestLostLeaseNodeDeleted(t *testing.T) {
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		px := newProxy(t, srv.Addr)
		l := open(t, "zk://"+px.Addr(), prefix, "session_timeout=4s&recipe="+recipe)
		ctx := testenv.Context(t, 60*time.Second)
		d := driverOf(l)
		d.s.testMargin.Store(int64(3 * time.Second)) // lost after 1s of silence
		ls, err := l.Acquire(ctx, "j", nil)
		if err != nil {
			t.Fatal(err)
		}
		sid := d.conn.SessionID()
		px.Pause()
		select {
		case <-ls.Done():
		case <-time.After(3 * time.Second):
			t.Fatal("lease not reported lost")
		}
		px.Resume()
		// The session survives (the stall was shorter than 4s); the node
		// must go without anyone calling Release.
		other := open(t, srv.URL, prefix, "recipe="+recipe)
		l2, err := other.Acquire(ctx, "j", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.conn.SessionID(); got != sid {
			t.Fatalf("the session did not survive (%x → %x): the test proves nothing", sid, got)
		}
		if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("release of the lost lease: %v", err)
		}
		expectHeld(t, ctx, l, "j", "the new holder keeps it")
		if err := l2.Release(ctx); err != nil {
			t.Error(err)
		}
		assertNoOrphans(t, admin, prefix)
	})
}

// TestCancelOnFrozenServer: an Acquire whose ctx ends while the server does
// not answer (its create in flight, or its node queued) returns at once;
// its clean-up goes on in the background and, once the server answers
// again, leaves no node behind.
func TestCancelOnFrozenServer(t *testing.T) {
	const bound = 100 * time.Millisecond // past ctx's end
	forRecipes(t, func(t *testing.T, srv *testenv.Server, admin *zk.Conn, prefix, recipe string) {
		px := newProxy(t, srv.Addr)
		ctx := testenv.Context(t, 60*time.Second)
		holder := open(t, srv.URL, prefix, "recipe="+recipe)
		w := open(t, "zk://"+px.Addr(), prefix, "recipe="+recipe)
		held, err := holder.Acquire(ctx, "frozen", nil)
		if err != nil {
			t.Fatal(err)
		}
		phases := []string{"create in flight"}
		if recipe == RecipeFair {
			phases = append(phases, "queued") // the basic recipe queues no node
		}
		for _, phase := range phases {
			var cctx context.Context
			var cancel context.CancelFunc
			errc := make(chan error, 1)
			if phase == "create in flight" {
				px.Pause()
				cctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
				go func() { _, err := w.Acquire(cctx, "frozen", nil); errc <- err }()
			} else {
				cctx, cancel = context.WithTimeout(ctx, time.Second)
				go func() { _, err := w.Acquire(cctx, "frozen", nil); errc <- err }()
				for len(kids(t, admin, prefix, "frozen")) != 2 {
					if cctx.Err() != nil {
						t.Fatal("the waiter never queued")
					}
					time.Sleep(2 * time.Millisecond)
				}
				px.Pause()
			}
			err := <-errc
			dl, _ := cctx.Deadline()
			late := time.Since(dl)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: Acquire returned %v, want DeadlineExceeded", phase, err)
			}
			if late > bound {
				t.Errorf("%s: Acquire returned %v after its ctx ended, want at most %v (the clean-up must not hold it)", phase, late, bound)
			}
			time.Sleep(300 * time.Millisecond) // frozen a while longer
			px.Resume()
			deadline := time.Now().Add(cleanupTimeout)
			for {
				k := kids(t, admin, prefix, "frozen")
				if len(k) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %v after the server answered again the queue is %v: the cancelled attempt left a node", phase, cleanupTimeout, k)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("%s: Acquire returned %v after its ctx ended", phase, late)
		}
		expectHeld(t, ctx, w, "frozen", "the holder keeps it")
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		ls, err := w.TryAcquire(ctx, "frozen", nil)
		if err != nil {
			t.Fatalf("after the clean-ups, the lock is not free: %v", err)
		}
		_ = ls.Release(ctx)
		assertNoOrphans(t, admin, prefix)
	})
}
