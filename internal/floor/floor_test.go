package floor

import (
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// cases are every floor: its server, whether it expires on the server's
// clock (else it holds until freed or until its connection ends), and
// whether freeing a lock twice is reported (a second COMMIT is not).
var cases = []struct {
	backend, strategy string
	url               func(testing.TB) string
	expires, twice    bool
}{
	{"redis", "", urlOf(testenv.Redis), true, true},
	{"redis", Unfenced, urlOf(testenv.Redis), true, true},
	{"redlock", "", redlockURL, true, true},
	{"redlock", Unfenced, redlockURL, true, true},
	{"redis+cluster", "", func(t testing.TB) string { return testenv.RedisCluster(t).URL }, true, true},
	{"zookeeper", "", urlOf(testenv.ZooKeeper), false, true},
	{"zookeeper", Unfenced, urlOf(testenv.ZooKeeper), false, true},
	{"postgres", "forupdate", urlOf(testenv.Postgres), false, false},
	{"postgres", "version", urlOf(testenv.Postgres), true, true},
	{"postgres", "advisory", urlOf(testenv.Postgres), false, true},
	{"mysql", "forupdate", urlOf(testenv.MySQL), false, false},
	{"mysql", "version", urlOf(testenv.MySQL), true, true},
	{"mysql", "getlock", urlOf(testenv.MySQL), false, true},
}

// urlOf is the URL of a server testenv starts.
func urlOf(server func(testing.TB) *testenv.Server) func(testing.TB) string {
	return func(t testing.TB) string { return server(t).URL }
}

// redlockURL names three independent Redis servers.
func redlockURL(t testing.TB) string {
	var hosts []string
	for _, s := range testenv.RedisNodes(t, 3) {
		hosts = append(hosts, s.Addr)
	}
	return "redlock://" + strings.Join(hosts, ",") + "/0"
}

func open(t *testing.T, rawURL, strategy string, opts *Options) *Lock {
	t.Helper()
	l, err := Open(testenv.Context(t, 30*time.Second), rawURL, strategy, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// A floor grants one holder, refuses a second at once, and grants again
// once freed; a holder that is gone frees it, by its lease's end or by
// its connection's, and its release then frees nothing. A fenced floor's
// tokens strictly increase across the holders; an unfenced floor's are 0.
func TestFloors(t *testing.T) {
	for _, c := range cases {
		t.Run(c.backend+"/"+c.strategy, func(t *testing.T) {
			if About(c.backend, c.strategy) == "" {
				t.Fatalf("About(%q, %q) is empty", c.backend, c.strategy)
			}
			fenced := Fenced(c.backend, c.strategy)
			if fenced != (c.strategy != Unfenced) {
				t.Errorf("Fenced(%q, %q) = %v", c.backend, c.strategy, fenced)
			}
			var tokens []uint64
			token := func(g *Grant) {
				t.Helper()
				if !fenced {
					if g.Token() != 0 {
						t.Errorf("an unfenced floor's token = %d, want 0", g.Token())
					}
					return
				}
				switch n := len(tokens); {
				case c.backend == "redlock":
					// The largest counter of the granting quorum, as dlock's
					// Redlock (which declares no fencing): when a node misses
					// its time budget under load, the next quorum's largest
					// counter may be the last one again. Every grant has one.
					if g.Token() == 0 {
						t.Errorf("a fenced Redlock floor's token is 0")
					}
				case n > 0 && g.Token() <= tokens[n-1]:
					t.Errorf("token %d after %v: tokens must strictly increase across holders", g.Token(), tokens)
				}
				tokens = append(tokens, g.Token())
			}
			srvURL := c.url(t)
			ctx := testenv.Context(t, time.Minute)
			ttl := 500 * time.Millisecond
			if c.backend == "mysql" && c.strategy != "version" {
				ttl = time.Second // wait_timeout counts whole seconds
			}
			a := open(t, srvURL, c.strategy, &Options{TTL: ttl})
			b := open(t, srvURL, c.strategy, &Options{TTL: ttl})
			name := "floor/test/" + rand.Text()

			gA, ok, err := a.TryAcquire(ctx, name)
			if err != nil || !ok {
				t.Fatalf("first holder: ok=%v, %v", ok, err)
			}
			token(gA)
			t0 := time.Now()
			if _, ok, err := b.TryAcquire(ctx, name); err != nil || ok {
				t.Fatalf("second holder while held: ok=%v, %v; want refused", ok, err)
			}
			if d := time.Since(t0); d > ttl/2 {
				t.Errorf("a refusal took %v: it waited", d)
			}
			if err := gA.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
			if c.twice {
				if err := gA.Release(ctx); !errors.Is(err, ErrNotHeld) {
					t.Errorf("second release = %v; want ErrNotHeld", err)
				}
			}
			gB, ok, err := b.TryAcquire(ctx, name)
			if err != nil || !ok {
				t.Fatalf("after the release: ok=%v, %v", ok, err)
			}
			token(gB)
			if err := gB.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// A holder that never frees the lock.
			gone := open(t, srvURL, c.strategy, &Options{TTL: ttl})
			gGone, ok, err := gone.TryAcquire(ctx, name)
			if err != nil || !ok {
				t.Fatalf("holder: ok=%v, %v", ok, err)
			}
			token(gGone)
			if _, ok, err := b.TryAcquire(ctx, name); err != nil || ok {
				t.Fatalf("second holder while held: ok=%v, %v; want refused", ok, err)
			}
			if c.expires {
				time.Sleep(ttl + 100*time.Millisecond)
			} else {
				if err := gone.Close(); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				if gB, ok, err = b.TryAcquire(ctx, name); err != nil {
					t.Fatal(err)
				}
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the lock of a holder that is gone was not freed within 5s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			token(gB)
			// The gone holder's release must not free its successor's lock.
			err = gGone.Release(ctx)
			if c.expires && !errors.Is(err, ErrNotHeld) || err == nil {
				t.Errorf("release of a lock that is gone = %v; want an error (ErrNotHeld where the connection is open)", err)
			}
			if _, ok, err := a.TryAcquire(ctx, name); err != nil || ok {
				t.Fatalf("after a gone holder's release: ok=%v, %v; want the successor's lock kept", ok, err)
			}
			if err := gB.Release(ctx); err != nil {
				t.Fatal(err)
			}
			gA, ok, err = a.TryAcquire(ctx, name)
			if err != nil || !ok {
				t.Fatalf("last holder: ok=%v, %v", ok, err)
			}
			token(gA)
			if err := gA.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A holder of a pinned SQL floor that hangs with its connection open
// loses the lock at the end of its TTL: the floor set the server's idle
// timeout with the lock, as dlock does, and put it back with the release.
func TestPinnedFloorsEndIdleHolders(t *testing.T) {
	for _, c := range cases {
		if c.expires || c.backend == "redis" || c.backend == "zookeeper" {
			continue
		}
		t.Run(c.backend+"/"+c.strategy, func(t *testing.T) {
			srvURL := c.url(t)
			ctx := testenv.Context(t, time.Minute)
			ttl := time.Second
			hung := open(t, srvURL, c.strategy, &Options{TTL: ttl})
			b := open(t, srvURL, c.strategy, &Options{TTL: ttl})
			name := "floor/idle/" + rand.Text()
			if _, ok, err := hung.TryAcquire(ctx, name); err != nil || !ok {
				t.Fatalf("holder: ok=%v, %v", ok, err)
			}
			start := time.Now()
			for {
				g, ok, err := b.TryAcquire(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					if err := g.Release(ctx); err != nil {
						t.Fatal(err)
					}
					break
				}
				if time.Since(start) > ttl+5*time.Second {
					t.Fatalf("a holder idle for %v still holds the lock (TTL %v)", time.Since(start), ttl)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Freeing the lock puts the timeout back: a floor's connection
			// idle between locks stays open.
			time.Sleep(ttl + time.Second)
			if err := b.Cycle(ctx, name); err != nil {
				t.Fatalf("after an idle time with no lock held: %v", err)
			}
		})
	}
}

// The ZooKeeper floor's token is dlock's: the czxid of the node that
// holds the lock.
func TestZooKeeperTokenIsCzxid(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	ctx := testenv.Context(t, 30*time.Second)
	l := open(t, srv.URL, "", nil)
	name := "floor/czxid/" + rand.Text()
	g, ok, err := l.TryAcquire(ctx, name)
	if err != nil || !ok {
		t.Fatalf("ok=%v, %v", ok, err)
	}
	c, err := DialZooKeeper(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parent := zkNode("fenced", name)
	kids, _, err := c.Children(parent)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of %s = %v, %v; want the holder's node alone", parent, kids, err)
	}
	_, st, err := c.Get(parent + "/" + kids[0])
	if err != nil {
		t.Fatal(err)
	}
	if uint64(st.Czxid) != g.Token() {
		t.Errorf("token %d, the node's czxid %d", g.Token(), st.Czxid)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRTT(t *testing.T) {
	servers := map[string]func(testing.TB) *testenv.Server{
		"redis": testenv.Redis, "zookeeper": testenv.ZooKeeper, "postgres": testenv.Postgres, "mysql": testenv.MySQL,
	}
	for backend, server := range servers {
		t.Run(backend, func(t *testing.T) {
			srv := server(t)
			ctx := testenv.Context(t, 30*time.Second)
			r, err := OpenRTT(ctx, srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if m, err := r.Median(ctx, 5); err != nil || m <= 0 {
				t.Fatalf("Median = %v, %v", m, err)
			}
			w, err := OpenWriteRTT(ctx, srv.URL)
			if backend != "zookeeper" {
				if err == nil {
					w.Close()
					t.Fatal("OpenWriteRTT: no error off ZooKeeper")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if m, err := w.Median(ctx, 5); err != nil || m <= 0 {
				t.Fatalf("write Median = %v, %v", m, err)
			}
		})
	}
}

func TestOpenRejects(t *testing.T) {
	ctx := testenv.Context(t, 10*time.Second)
	for _, c := range []struct{ url, strategy string }{
		{"mem://", ""},
		{"redis://127.0.0.1:1/0", "version"},
		{"postgres://u@127.0.0.1:1/db", "getlock"},
		{"mysql://u@127.0.0.1:1/db", "advisory"},
	} {
		if l, err := Open(ctx, c.url, c.strategy, nil); err == nil {
			l.Close()
			t.Errorf("Open(%q, %q): no error", c.url, c.strategy)
		}
	}
}

// A connection error does not quote the password.
func TestErrorsHideThePassword(t *testing.T) {
	ctx := testenv.Context(t, 10*time.Second)
	for _, u := range []string{"postgres://u:s3cretpw@127.0.0.1:1/db?connect_timeout=1", "mysql://u:s3cretpw@127.0.0.1:1/db", "redis://:s3cretpw@127.0.0.1:1/0%zz"} {
		_, err := DialSQL(ctx, u)
		if _, e := OpenRTT(ctx, u); err == nil {
			err = e
		}
		if err == nil {
			t.Fatalf("%s: no error", u)
		}
		if s := err.Error(); contains(s, "s3cretpw") {
			t.Errorf("error quotes the password: %s", s)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A forupdate floor's token never goes back across a kill -9 of the
// server, as dlock's does not: the counter's advance is not flushed, so
// the crash may set it back, and the floor must move it on first (its
// marker, emptied by the crash, says so). PostgreSQL's WAL writer is
// slowed down so that the sequence's advance is surely not on disk.
func TestForUpdateFloorTokenAfterCrash(t *testing.T) {
	servers := []struct {
		backend string
		start   func(testing.TB) *testenv.Server
	}{
		{"postgres", func(t testing.TB) *testenv.Server {
			return testenv.NewPostgres(t, &testenv.PGOptions{Durable: true, Config: []string{"wal_writer_delay=10s", "wal_writer_flush_after=0"}})
		}},
		{"mysql", func(t testing.TB) *testenv.Server { return testenv.NewMySQL(t, nil) }},
	}
	for _, s := range servers {
		t.Run(s.backend, func(t *testing.T) {
			srv := s.start(t)
			ctx := testenv.Context(t, 3*time.Minute)
			var last uint64
			for round := range 3 {
				l, err := Open(ctx, srv.URL, "forupdate", nil)
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				for i := range 5 {
					g, ok, err := l.TryAcquire(ctx, "crash")
					if err != nil || !ok {
						t.Fatalf("round %d: ok=%v, %v", round, ok, err)
					}
					if g.Token() <= last {
						t.Fatalf("round %d, grant %d: token %d after %d: the token went back across a kill -9 of the server", round, i, g.Token(), last)
					}
					last = g.Token()
					if i < 4 { // the last grant is held across the crash
						if err := g.Release(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := srv.Restart(ctx); err != nil {
					t.Fatal(err)
				}
				l.Close()
			}
		})
	}
}

// The Redlock floor is held on a quorum of nodes, not on all of them: a
// minority held by another owner does not refuse it, a majority does, and
// a refused attempt leaves nothing on the nodes it got. Its token is the
// largest counter of the granting nodes, as dlock's Redlock's.
func TestRedlockFloorQuorum(t *testing.T) {
	nodes := testenv.RedisNodes(t, 3)
	ctx := testenv.Context(t, time.Minute)
	l := open(t, redlockURL(t), "", nil)
	do := func(n *testenv.Server, args ...string) any {
		t.Helper()
		v, err := testenv.RedisDo(ctx, n.Addr, args...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	name := "floor/quorum/" + rand.Text()
	key := keyPrefix + name
	do(nodes[2], "SET", fencePrefix+key, "1000")
	do(nodes[0], "SET", key, "another", "PX", "60000")
	g, ok, err := l.TryAcquire(ctx, name)
	if err != nil || !ok {
		t.Fatalf("with one node of three held by another owner: ok=%v, %v; want granted", ok, err)
	}
	if g.Token() != 1001 {
		t.Errorf("token %d; want 1001, the largest counter of the quorum", g.Token())
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	do(nodes[1], "SET", key, "another", "PX", "60000")
	if _, ok, err := l.TryAcquire(ctx, name); err != nil || ok {
		t.Fatalf("with two nodes of three held by another owner: ok=%v, %v; want refused", ok, err)
	}
	if v := do(nodes[2], "EXISTS", key); v != int64(0) {
		t.Errorf("a refused attempt left its key on the node that granted it (EXISTS = %v)", v)
	}
}
