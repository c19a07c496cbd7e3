package backendtest_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/testenv"

	_ "github.com/dlock-go/dlock/mysql"
	_ "github.com/dlock-go/dlock/postgres"
	_ "github.com/dlock-go/dlock/redis"
	_ "github.com/dlock-go/dlock/zookeeper"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// TestTable: every row names a linked driver and a testenv kind, and
// Lookup finds it.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, b := range backendtest.Backends() {
		if seen[b.Name] {
			t.Errorf("%s: two rows", b.Name)
		}
		seen[b.Name] = true
		if b.Module == "" && !slices.Contains(dlock.Schemes(), b.Scheme) {
			t.Errorf("%s: scheme %s is not registered", b.Name, b.Scheme)
		}
		if b.Kind == "" || b.Nodes < 1 || (b.Param == "") != (len(b.Strategies) == 0) {
			t.Errorf("%s: incomplete row %+v", b.Name, b)
		}
		if backendtest.Lookup(b.Name).Name != b.Name {
			t.Errorf("Lookup(%q) finds another row", b.Name)
		}
	}
	if backendtest.Lookup("nosuch") != nil {
		t.Error("Lookup of an unknown backend is not nil")
	}
}

// TestHooks runs CheckHooks on every backend whose driver is linked here
// (the etcd module runs it for its own rows).
func TestHooks(t *testing.T) {
	for _, b := range backendtest.Backends() {
		if b.Name == "zookeeper-ensemble" || b.Module != "" {
			continue // the ensemble: the same hooks as a single ZooKeeper server, on 3 JVMs
		}
		t.Run(b.Name, func(t *testing.T) { backendtest.CheckHooks(t, b) })
	}
}

// TestStartOwnsServers: fresh servers come with Restart, and a Redis
// restart with persistence keeps the lock's fence.
func TestStartOwnsServers(t *testing.T) {
	env := backendtest.Lookup("redis").New(t, &backendtest.Options{Persistence: true})
	ctx := testenv.Context(t, time.Minute)
	hooks := env.Hooks(env.URL(""))
	defer hooks.Close()
	if hooks.Restart == nil || hooks.ExpireEarly != nil || hooks.Leader != nil || hooks.RestartReusingIDs != nil {
		t.Fatalf("redis hooks: Restart %v, ExpireEarly %v, Leader %v, RestartReusingIDs %v",
			hooks.Restart != nil, hooks.ExpireEarly != nil, hooks.Leader != nil, hooks.RestartReusingIDs != nil)
	}
	l, err := dlock.Open(ctx, env.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := l.Acquire(ctx, "restart", &dlock.AcquireOptions{NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := hooks.Restart(ctx, -1); err != nil {
		t.Fatal(err)
	}
	if err := hooks.Revoke(ctx, "restart"); err != nil {
		t.Fatalf("Revoke after a restart with persistence: %v (the lock was forgotten)", err)
	}
	b, err := l.Acquire(ctx, "restart", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Errorf("token %d after a restart, %d before", b.Token(), a.Token())
	}
}

func TestURL(t *testing.T) {
	t.Run("zookeeper", func(t *testing.T) {
		env := backendtest.Lookup("zookeeper").Shared(t, &backendtest.Options{SessionTimeout: 2 * time.Second})
		want := env.Servers[0].URL + "?session_timeout=2s&recipe=basic"
		if got := env.URL("basic"); got != want {
			t.Errorf("URL(basic) = %q, want %q", got, want)
		}
		if got := env.Namespace(env.URL(""), "x"); !strings.Contains(got, "/dlockct/x?session_timeout=2s") {
			t.Errorf("Namespace = %q", got)
		}
	})
	t.Run("redis", func(t *testing.T) {
		env := backendtest.Lookup("redis").Shared(t, &backendtest.Options{SessionTimeout: 2 * time.Second})
		if got := env.URL(""); got != env.Servers[0].URL {
			t.Errorf("URL = %q: a ZooKeeper option reached a Redis URL", got)
		}
		if got := env.Namespace(env.URL(""), "x"); !strings.HasSuffix(got, "prefix=dlockct:x:") {
			t.Errorf("Namespace = %q", got)
		}
	})
}
