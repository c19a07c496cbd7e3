package testenv

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// etcdPutGet writes key=val through the gateway of addr and reads it back
// from readAddr.
func etcdPutGet(t *testing.T, addr, readAddr, key, val string) {
	t.Helper()
	ctx := testCtx(t)
	b64 := base64.StdEncoding.EncodeToString
	if err := EtcdCall(ctx, addr, "/v3/kv/put", map[string]string{"key": b64([]byte(key)), "value": b64([]byte(val))}, nil); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Kvs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := EtcdCall(ctx, readAddr, "/v3/kv/range", map[string]string{"key": b64([]byte(key))}, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != val {
		t.Fatalf("range %s = %+v, want %q", key, r, val)
	}
}

func TestEtcd(t *testing.T) {
	Require(t, KindEtcd)
	ctx := testCtx(t)
	s, err := StartEtcd(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd started in %v (%s, version %s)", s.StartupTime.Round(time.Millisecond), driver.Redact(s.URL), s.Version)
	if s.Version == "" || s.Settings["fsync"] != "on" {
		t.Errorf("Version %q, Settings %v", s.Version, s.Settings)
	}
	etcdPutGet(t, s.Addr, s.Addr, "k", "v1")
	// The data survives a SIGKILL (fsync is on).
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	etcdPutGet(t, s.Addr, s.Addr, "k2", "v2")
	closeAndCheck(t, s)
}

func TestEtcdUnsafeNoFsync(t *testing.T) {
	s := NewEtcd(t, &EtcdOptions{UnsafeNoFsync: true})
	if s.Settings["fsync"] != "off" {
		t.Errorf("Settings = %v", s.Settings)
	}
	etcdPutGet(t, s.Addr, s.Addr, "k", "v")
}

func TestEtcdCluster(t *testing.T) {
	Require(t, KindEtcd)
	ctx := testCtx(t)
	c := NewEtcdCluster(t, 3, nil)
	t.Logf("etcd 3-member cluster started in %v (%s)", c.StartupTime.Round(time.Millisecond), driver.Redact(c.URL))
	etcdPutGet(t, c.Addrs[0], c.Addrs[2], "k", "v")
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Killing the leader leaves a quorum that elects a new one; the old
	// leader rejoins.
	if err := c.Servers[leader].Kill(); err != nil {
		t.Fatal(err)
	}
	other := c.Addrs[(leader+1)%3]
	if err := poll(ctx, "no new leader", func() error { return etcdHealth(ctx, other) }); err != nil {
		t.Fatal(err)
	}
	if err := c.Servers[leader].Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	etcdPutGet(t, other, c.Addrs[leader], "k2", "v2")
	for _, s := range c.Servers {
		closeAndCheck(t, s)
	}
}
