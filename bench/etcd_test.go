package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	dlocketcd "github.com/dlock-go/dlock/etcd"
	"github.com/dlock-go/dlock/internal/testenv"
)

// The lease the etcd rows ask for is one etcd grants as it is: at least
// the driver's MinTTL, in whole seconds; and it is the benchmark's
// LeaseTTL unless that is below MinTTL, when the rows' notes say so.
func TestEtcdTTL(t *testing.T) {
	ttl := EtcdTTL()
	if ttl < dlocketcd.MinTTL || ttl%time.Second != 0 {
		t.Fatalf("EtcdTTL = %v: below etcd's MinTTL %v or not whole seconds", ttl, dlocketcd.MinTTL)
	}
	if LeaseTTL >= dlocketcd.MinTTL && (ttl != LeaseTTL || EtcdTTLNote() != "") {
		t.Errorf("EtcdTTL = %v (note %q); LeaseTTL %v is accepted by etcd and should be used as is", ttl, EtcdTTLNote(), LeaseTTL)
	}
	if LeaseTTL < dlocketcd.MinTTL && !strings.Contains(EtcdTTLNote(), "MinTTL") {
		t.Errorf("EtcdTTLNote = %q; it must say the rows use MinTTL", EtcdTTLNote())
	}
	if got := etcdTTLSeconds(); time.Duration(got)*time.Second != ttl {
		t.Errorf("etcdTTLSeconds = %d for %v", got, ttl)
	}
}

// An etcd server's targets: the dlock row compared with the etcd floor
// and the linearizable Get, and etcd's own Mutex as the peer on the same
// floor; every one has a note, and the URL the hand-written clients get
// has neither the driver's prefix nor its parameters.
func TestCatalogEtcd(t *testing.T) {
	s := &Server{ID: "etcd", Backend: "etcd", URL: "etcd://127.0.0.1:1,127.0.0.1:2/pfx?dial_timeout=1s"}
	byName := targetsOf(t, s)
	dl, fl, rtt, mu := byName["etcd"], byName["floor etcd"], byName["rtt etcd"], byName["etcd Mutex"]
	if dl.Kind != KindDlock || fl.Kind != KindFloor || rtt.Kind != KindRTT || mu.Kind != KindPeer {
		t.Fatalf("targets: %v", byName)
	}
	if len(byName) != 4 {
		t.Errorf("%d targets, want 4: %v", len(byName), byName)
	}
	if dl.Floor != fl.Name || dl.RTT != rtt.Name || mu.Floor != fl.Name || mu.RTT != rtt.Name {
		t.Errorf("etcd compares with %q/%q, the Mutex with %q/%q", dl.Floor, dl.RTT, mu.Floor, mu.RTT)
	}
	if dl.URL != s.URL {
		t.Errorf("dlock row URL = %q, want the server's", dl.URL)
	}
	for _, tg := range []Target{fl, rtt, mu} {
		if tg.URL != "etcd://127.0.0.1:1,127.0.0.1:2" {
			t.Errorf("%s: URL %q, want the hosts alone", tg.Name, tg.URL)
		}
	}
	for _, tg := range []Target{fl, mu} {
		if tg.Note == "" {
			t.Errorf("%s has no note", tg.Name)
		}
	}
	if !strings.Contains(mu.Note, "share the session's lease") {
		t.Errorf("the Mutex's note %q does not say its locks share the session's lease", mu.Note)
	}
	if FamilyOf("etcds://h/p") != "etcd" || FamilyOf("etcd://h") != "etcd" {
		t.Error("FamilyOf does not know etcd's schemes")
	}
	if len(mu.Name) > 16 {
		t.Errorf("peer name %q is too long for a chart", mu.Name)
	}
}

// etcdTargets returns the targets of the shared etcd server, by name.
func etcdTargets(t *testing.T) (*testenv.Server, map[string]Target) {
	srv := testenv.Etcd(t)
	return srv, targetsOf(t, &Server{ID: "etcd", Backend: "etcd", URL: srv.URL + "/dlockbench-test"})
}

// etcdKeys counts the keys under a prefix and the server's leases.
func etcdKeys(t *testing.T, ctx context.Context, srv *testenv.Server, prefix string) (keys int64, leases int) {
	t.Helper()
	cli, err := dialEtcd(ctx, Target{Name: "check", URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r.Count, len(ls.Leases)
}

// The etcd floor on a real server: tokens strictly increase, a second
// attempt on a held name fails and leaves nothing behind, and a released
// lock leaves no key and, once the client is closed, no lease.
func TestEtcdFloor(t *testing.T) {
	srv, byName := etcdTargets(t)
	ctx := testenv.Context(t, time.Minute)
	_, leases0 := etcdKeys(t, ctx, srv, "/dlockbench-floor/")
	c1, err := Open(ctx, byName["floor etcd"])
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Open(ctx, byName["floor etcd"])
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	name := "floor/" + t.Name() // a '/' in a name stays in its own queue
	var last uint64
	for range 5 {
		h, err := c1.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if h.Token() <= last {
			t.Fatalf("token %d after %d", h.Token(), last)
		}
		last = h.Token()
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h, err := c1.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if h2, err := c2.Acquire(actx, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second floor client acquired a held name: %v, %v", h2, err)
	}
	cancel()
	if n := c2.FailedAttempts(); n == 0 {
		t.Error("the second client's failed attempts were not counted")
	}
	if keys, _ := etcdKeys(t, ctx, srv, "/dlockbench-floor/"); keys != 1 {
		t.Errorf("%d floor keys while one is held, want 1 (a failed attempt must delete its key)", keys)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	keys, leases := etcdKeys(t, ctx, srv, "/dlockbench-floor/")
	if keys != 0 || leases > leases0 {
		t.Errorf("after release and close: %d keys, %d leases (%d before): the floor leaves things behind", keys, leases, leases0)
	}
}

// etcd's Mutex, the peer: a waiter gets the lock when the holder releases
// it, not before; a cancelled waiter returns its context's error and
// leaves no key; closing the client ends its session.
func TestEtcdMutexPeer(t *testing.T) {
	srv, byName := etcdTargets(t)
	ctx := testenv.Context(t, time.Minute)
	c1, err := Open(ctx, byName["etcd Mutex"])
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Open(ctx, byName["etcd Mutex"])
	if err != nil {
		t.Fatal(err)
	}
	h1, err := c1.Acquire(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := c2.Acquire(actx, "m"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter on a held Mutex: %v, want its deadline", err)
	}
	cancel()
	got := make(chan error, 1)
	released := make(chan struct{})
	go func() {
		h2, err := c2.Acquire(ctx, "m")
		select {
		case <-released:
		default:
			err = errors.New("acquired before the holder released")
		}
		if err == nil {
			err = h2.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	close(released)
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if keys, _ := etcdKeys(t, ctx, srv, "/dlockbench-mutex/"); keys != 0 {
		t.Errorf("%d Mutex keys left", keys)
	}
	_, leases0 := etcdKeys(t, ctx, srv, "/")
	c1.Close()
	c2.Close()
	if _, leases := etcdKeys(t, ctx, srv, "/"); leases != leases0-2 {
		t.Errorf("leases %d -> %d after closing two clients: their sessions' leases must go", leases0, leases)
	}
}

// The Mutex's session outlives the context it was opened with (an
// opener's timeout): its lease is still kept alive after more than its TTL.
func TestEtcdMutexSessionOutlivesOpenContext(t *testing.T) {
	_, byName := etcdTargets(t)
	ctx := testenv.Context(t, time.Minute)
	octx, cancel := context.WithCancel(ctx)
	ttl := int64(dlocketcd.MinTTL / time.Second)
	c, err := newEtcdMutex(octx, byName["etcd Mutex"], ttl)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(time.Duration(ttl)*time.Second + 1500*time.Millisecond)
	h, err := c.Acquire(ctx, "outlives")
	if err != nil {
		t.Fatalf("acquire after the open context ended and a TTL passed: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The etcd rows under contention, through the runner and its checker: a
// handoff of the dlock row and of the Mutex, zero violations (and the
// dlock row's tokens checked), and the round trip answers.
func TestEtcdRowsRun(t *testing.T) {
	srv, byName := etcdTargets(t)
	ctx := testenv.Context(t, time.Minute)
	s := &Server{ID: "etcd", Backend: "etcd", URL: srv.URL, PID: srv.Pid()}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// A second, not 300ms: make test runs the fault suite beside this
	// module, and the Mutex row once made 9 grants in 300ms then.
	w := Workload{Kind: Handoff, Clients: 4, Names: 1, Hold: time.Millisecond, Work: time.Millisecond, Duration: time.Second}
	for _, name := range []string{"etcd", "etcd Mutex"} {
		r := &Runner{}
		res, err := r.Run(ctx, byName[name], w, s.Sample)
		if err != nil {
			t.Fatal(err)
		}
		row := NewRow(res)
		if row.Grants < 10 || row.Violations != 0 || row.FencingViolations != 0 || row.Errors != 0 {
			t.Errorf("%s: grants=%d violations=%d/%d errors=%d (%s)", name, row.Grants,
				row.Violations, row.FencingViolations, row.Errors, row.LastError)
		}
	}
}

// The dlock rows ask for rowTTL: the etcd driver accepts it, and grants a
// lease of exactly that length.
func TestEtcdRowTTLAccepted(t *testing.T) {
	srv := testenv.Etcd(t)
	ctx := testenv.Context(t, time.Minute)
	c, err := Open(ctx, Target{Name: "etcd", Kind: KindDlock, URL: srv.URL + "/dlockbench-ttl"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dc := c.(*dlockClient)
	if dc.opts.TTL != EtcdTTL() {
		t.Errorf("the etcd row asks for %v, want EtcdTTL %v", dc.opts.TTL, EtcdTTL())
	}
	h, err := c.Acquire(ctx, "ttl")
	if err != nil {
		t.Fatalf("the etcd driver refuses the row's TTL %v: %v", dc.opts.TTL, err)
	}
	if got := h.(lease).TTL(); got != dc.opts.TTL {
		t.Errorf("lease TTL %v, want %v", got, dc.opts.TTL)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
