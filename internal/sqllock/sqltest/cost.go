package sqltest

import (
	"context"
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
