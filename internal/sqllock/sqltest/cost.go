package sqltest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// Flights counts the round trips and writes of every connection wrapped
// by it: a write that follows a read (or starts the connection) begins a
// round trip. A driver's round-trip test wraps its pool's connections
// with Wrap (pgx's DialFunc, go-sql-driver's RegisterDialContext).
type Flights struct {
	mu     sync.Mutex
	n      int
	writes int
}

// Wrap returns c counted by f.
func (f *Flights) Wrap(c net.Conn) net.Conn { return &countedConn{Conn: c, f: f, read: true} }

// Count returns the round trips and writes so far.
func (f *Flights) Count() (roundTrips, writes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.writes
}

type countedConn struct {
	net.Conn
	f    *Flights
	read bool // the last I/O was a read
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.f.mu.Lock()
	c.f.writes++
	if c.read {
		c.f.n++
	}
	c.read = false
	c.f.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.f.mu.Lock()
	c.read = true
	c.f.mu.Unlock()
	return n, err
}

// Cycle returns one uncontended TryAcquire+Release of name on l, failing
// the test on an error.
func Cycle(t testing.TB, ctx context.Context, l *dlock.Locker, name string) func() {
	opts := &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true}
	return func() {
		t.Helper()
		ls, err := l.TryAcquire(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TokenAfterCrash: a forupdate grant takes its token from a counter whose
// advance is never flushed on its own (the release rolls back), so a
// crash of the server (kill -9) can set the counter back before it. The
// next grant after the crash must still get a larger token: the crash
// empties the marker table, and the next acquire moves the counter on
// before it takes a token. srv is a server of the test's own (it is
// restarted); even rounds take the second grant through the Locker of
// the first, which finds the marker missing when it acquires (after its
// broken connections are replaced), odd rounds through a new Locker,
// which recovers when it first reaches the server.
func TokenAfterCrash(t *testing.T, srv *testenv.Server) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	opts := &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true}
	l := Open(t, ctx, WithParams(srv.URL, "strategy", "forupdate"))
	for round := range 4 {
		a, err := l.TryAcquire(ctx, "crash", opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		// The application learns that a is gone (its connection died
		// with the server) and releases it: until then the Locker's gate
		// refuses a sibling's TryAcquire of the name without asking the
		// server, since a lease of its own holds it as far as it knows.
		_ = a.Release(ctx)
		if round%2 == 1 {
			l.Close()
			l = Open(t, ctx, WithParams(srv.URL, "strategy", "forupdate"))
		}
		var b *dlock.Lease
		for try := 0; b == nil; try++ {
			if b, err = l.TryAcquire(ctx, "crash", opts); err != nil && try == 10 {
				t.Fatalf("round %d: after the restart: %v", round, err)
			}
		}
		if b.Token() <= a.Token() {
			t.Fatalf("round %d: token %d after a kill -9 of the server, %d before it: the token went back", round, b.Token(), a.Token())
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
}

// WaitRoundTrips: a blocking Acquire of a native lock held by another
// client waits on the session its Locker keeps without leases, in one
// round trip from the call to the grant (no try first, no second
// connection, no setup), and the grant shares that session: the
// Release is one round trip more, and nothing else is sent (no session
// given back and reset). l is a native Locker whose pool's connections f
// counts; other is another Locker on the server.
func WaitRoundTrips(t *testing.T, l, other *dlock.Locker, f *Flights) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("wait-rt/%d", time.Now().UnixNano())
	for range 3 {
		Cycle(t, ctx, l, name+"/warm")() // a session kept without leases
	}
	for round := range 4 { // round 0 prepares the wait's statement
		held, err := other.TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		r0, _ := f.Count()
		got := make(chan *dlock.Lease, 1)
		go func() {
			ls, err := l.Acquire(ctx, name, &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true})
			if err != nil {
				t.Error(err)
			}
			got <- ls
		}()
		time.Sleep(100 * time.Millisecond) // in the server's queue
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		ls := <-got
		if ls == nil {
			t.FailNow()
		}
		r1, _ := f.Count()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // a session given back would be reset by now
		r2, _ := f.Count()
		t.Logf("round %d: %d round trips to a grant after a wait, %d after it", round, r1-r0, r2-r1)
		if round > 0 && (r1-r0 != 1 || r2-r1 != 1) {
			t.Errorf("round %d: a blocking Acquire of a held lock took %d round trips to its grant and %d to its release and after, want 1 and 1", round, r1-r0, r2-r1)
		}
	}
}
