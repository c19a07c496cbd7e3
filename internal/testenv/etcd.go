package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// EtcdOptions configure StartEtcd, StartEtcdCluster and their test
// helpers. The zero value (or nil) is etcd's own durability: every write
// fsynced.
type EtcdOptions struct {
	// UnsafeNoFsync starts etcd with --unsafe-no-fsync: much faster, and
	// what the benchmark reports as "fsync=off" (like ZooKeeper's
	// forceSync=no). A crash of every member may then lose acknowledged
	// writes, revisions included.
	UnsafeNoFsync bool
}

func etcdPath() (string, error) {
	if p := os.Getenv("DLOCK_ETCD"); p != "" {
		if !fileExists(p) {
			return "", &missingError{what: p + " (DLOCK_ETCD)"}
		}
		return p, nil
	}
	return lookPath("etcd")
}

// EtcdCluster is an etcd cluster on loopback (one member or more).
type EtcdCluster struct {
	// Servers are the members, in the order of the initial cluster.
	Servers []*Server
	// URL is "etcd://127.0.0.1:P1,127.0.0.1:P2,...".
	URL string
	// Addrs are the members' client addresses.
	Addrs []string
	// StartupTime is the time until every member reported itself healthy.
	StartupTime time.Duration

	shared bool
}

// StartEtcd starts a one-member etcd cluster on free loopback ports (client
// and peer). Close it when done.
func StartEtcd(ctx context.Context, opts *EtcdOptions) (*Server, error) {
	c, err := startEtcd(ctx, 1, opts)
	if err != nil {
		return nil, err
	}
	return c.Servers[0], nil
}

// StartEtcdCluster starts n (3 or more) etcd members forming one cluster on
// loopback and waits until every one is healthy (has a leader). Close it
// when done.
func StartEtcdCluster(ctx context.Context, n int, opts *EtcdOptions) (*EtcdCluster, error) {
	if n < 3 {
		return nil, fmt.Errorf("testenv: an etcd cluster needs at least 3 members, not %d", n)
	}
	return startEtcd(ctx, n, opts)
}

func startEtcd(ctx context.Context, n int, opts *EtcdOptions) (*EtcdCluster, error) {
	if dockerMode() {
		return nil, fmt.Errorf("testenv: etcd: %w", errDockerUnsupported)
	}
	if opts == nil {
		opts = &EtcdOptions{}
	}
	bin, err := etcdPath()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	var c *EtcdCluster
	err = retryBind(ctx, func() (err error) {
		c, err = tryStartEtcd(ctx, bin, n, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.StartupTime = time.Since(t0)
	for _, s := range c.Servers {
		s.StartupTime = c.StartupTime
	}
	return c, nil
}

// etcdMember is the configuration of one member.
type etcdMember struct {
	name         string
	client, peer int
	dir          string
}

func (m etcdMember) peerURL() string   { return "http://" + loopback(m.peer) }
func (m etcdMember) clientURL() string { return "http://" + loopback(m.client) }

func tryStartEtcd(ctx context.Context, bin string, n int, opts *EtcdOptions) (*EtcdCluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &EtcdCluster{}
	members := make([]etcdMember, n)
	for i := range members {
		dir, err := newDir("etcd")
		if err != nil {
			c.close()
			return nil, err
		}
		// The directory's random suffix makes the member's name, and so
		// the cluster's token, unique: the readiness check asks the
		// answering member for its name.
		members[i] = etcdMember{name: filepath.Base(dir), client: ports[2*i], peer: ports[2*i+1], dir: dir}
		c.Servers = append(c.Servers, &Server{Kind: KindEtcd, Dir: dir, stopSig: syscall.SIGTERM})
	}
	var initial []string
	for _, m := range members {
		initial = append(initial, m.name+"="+m.peerURL())
	}
	token := members[0].name
	fsync := "on"
	if opts.UnsafeNoFsync {
		fsync = "off"
	}
	for i, m := range members {
		s := c.Servers[i]
		s.Addr = loopback(m.client)
		s.DSN = s.Addr
		s.URL = "etcd://" + s.Addr
		s.Settings = map[string]string{"fsync": fsync}
		args := []string{
			"--name", m.name,
			"--data-dir", filepath.Join(m.dir, "data"),
			"--listen-client-urls", m.clientURL(),
			"--advertise-client-urls", m.clientURL(),
			"--listen-peer-urls", m.peerURL(),
			"--initial-advertise-peer-urls", m.peerURL(),
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--logger", "zap", "--log-outputs", "stderr",
		}
		if opts.UnsafeNoFsync {
			args = append(args, "--unsafe-no-fsync")
		}
		s.command = func() *exec.Cmd { return newCmd(nil, m.dir, bin, args...) }
		name := m.name
		s.ready = func(ctx context.Context) error { return etcdReady(ctx, s, name, n == 1) }
		c.Addrs = append(c.Addrs, s.Addr)
	}
	c.URL = "etcd://" + strings.Join(c.Addrs, ",")
	if err := startTogether(ctx, c.Servers); err != nil {
		c.close()
		return nil, err
	}
	if n > 1 {
		if err := c.WaitHealthy(ctx); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// EtcdCall posts a JSON request to the gRPC gateway of the etcd member at
// addr (path as "/v3/kv/range") and decodes its answer into out. Keys and
// values in etcd's JSON are base64 ([]byte fields); 64-bit integers are
// strings.
func EtcdCall(ctx context.Context, addr, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("testenv: etcd: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("testenv: etcd: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := etcdHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("testenv: etcd: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("testenv: etcd: %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("testenv: etcd %s: %s: %s: %s", addr, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("testenv: etcd: %s: %w", path, err)
	}
	return nil
}

// etcdHTTP is the gateway's client: no proxy from the environment, which
// could stand between the tests and a loopback server.
var etcdHTTP = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}

type etcdHeader struct {
	MemberID string `json:"member_id"`
}

// etcdReady checks that the member at s.Addr is ours (it answers with the
// member id whose name is name, not another server that took the port) and,
// for a one-member cluster, that it is healthy; it records the version.
func etcdReady(ctx context.Context, s *Server, name string, healthy bool) error {
	var ml struct {
		Header  etcdHeader `json:"header"`
		Members []struct {
			ID   string `json:"ID"`
			Name string `json:"name"`
		} `json:"members"`
	}
	if err := EtcdCall(ctx, s.Addr, "/v3/cluster/member/list", struct{}{}, &ml); err != nil {
		return err
	}
	ours := false
	for _, m := range ml.Members {
		if m.ID == ml.Header.MemberID {
			ours = m.Name == name
		}
	}
	if !ours {
		return fmt.Errorf("testenv: etcd %s: answered by another server", s.Addr)
	}
	if healthy {
		if err := etcdHealth(ctx, s.Addr); err != nil {
			return err
		}
	}
	if s.Version == "" {
		var v struct {
			Server string `json:"etcdserver"`
		}
		if etcdGet(ctx, s.Addr, "/version", &v) == nil {
			s.Version = v.Server
		}
	}
	return nil
}

func etcdGet(ctx context.Context, addr, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return fmt.Errorf("testenv: etcd: %w", err)
	}
	resp, err := etcdHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("testenv: etcd: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("testenv: etcd %s%s: %s: %q", addr, path, resp.Status, b)
	}
	return nil
}

// etcdHealth is GET /health: "true" once the member has a leader and
// serves a linearizable read.
func etcdHealth(ctx context.Context, addr string) error {
	var h struct {
		Health string `json:"health"`
	}
	if err := etcdGet(ctx, addr, "/health", &h); err != nil {
		return err
	}
	if h.Health != "true" {
		return fmt.Errorf("testenv: etcd %s: health %q", addr, h.Health)
	}
	return nil
}

// WaitHealthy waits until every member reports itself healthy (after
// killing and restarting members, say).
func (c *EtcdCluster) WaitHealthy(ctx context.Context) error {
	return poll(ctx, "etcd cluster not healthy", func() error {
		for _, s := range c.Servers {
			if err := etcdHealth(ctx, s.Addr); err != nil {
				return err
			}
		}
		return nil
	})
}

// Leader returns the index in Servers of the member that the members
// report as leader.
func (c *EtcdCluster) Leader(ctx context.Context) (int, error) {
	var leader string
	ids := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		var st struct {
			Header etcdHeader `json:"header"`
			Leader string     `json:"leader"`
		}
		if err := EtcdCall(ctx, s.Addr, "/v3/maintenance/status", struct{}{}, &st); err != nil {
			continue
		}
		ids[i] = st.Header.MemberID
		if st.Leader != "" && st.Leader != "0" {
			leader = st.Leader
		}
	}
	for i, id := range ids {
		if id != "" && id == leader {
			return i, nil
		}
	}
	return 0, errors.New("testenv: etcd cluster: no leader")
}

// Close closes every member.
func (c *EtcdCluster) Close() error {
	if c.shared {
		return ErrShared
	}
	return c.close()
}

func (c *EtcdCluster) close() error { return closeServers(c.Servers) }
