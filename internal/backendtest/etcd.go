package backendtest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/testenv"
)

// The etcd hooks speak to etcd's JSON gateway (testenv.EtcdCall), not
// through go.etcd.io/etcd/client/v3: the etcd driver is a module of its
// own so that grpc and its kin stay out of the library's requirements, and
// this package is the library's.

func startEtcd(ctx context.Context, o *Options) (*Env, error) {
	s, err := testenv.StartEtcd(ctx, &testenv.EtcdOptions{UnsafeNoFsync: o.UnsafeNoFsync})
	if err != nil {
		return nil, err
	}
	return single(s, true), nil
}

func sharedEtcd(t testing.TB, _ *Options) *Env { return single(testenv.Etcd(t), false) }

func etcdClusterEnv(c *testenv.EtcdCluster) *Env {
	return &Env{Servers: c.Servers, Upstreams: c.Addrs, EtcdCluster: c, base: c.URL}
}

func startEtcdCluster(ctx context.Context, o *Options) (*Env, error) {
	c, err := testenv.StartEtcdCluster(ctx, o.Nodes, &testenv.EtcdOptions{UnsafeNoFsync: o.UnsafeNoFsync})
	if err != nil {
		return nil, err
	}
	e := etcdClusterEnv(c)
	e.close = c.Close
	return e, nil
}

// newEtcdCluster is the cluster's Shared: a dedicated cluster for t (as
// for a ZooKeeper ensemble), whose hooks may restart its members.
func newEtcdCluster(t testing.TB, o *Options) *Env {
	e := etcdClusterEnv(testenv.NewEtcdCluster(t, o.Nodes, &testenv.EtcdOptions{UnsafeNoFsync: o.UnsafeNoFsync}))
	e.own = true
	return e
}

// etcdNamespace puts the keys of rawURL under the prefix /dlockct/<id>.
func etcdNamespace(rawURL, id string) string { return zkNamespace(rawURL, id) }

// etcdAdmin reaches the keys of one prefix through the gateway of the
// first member that answers.
type etcdAdmin struct {
	prefix string
	addrs  []string
}

func etcdHooks(e *Env, _ string, u *url.URL, _ string) *Hooks {
	a := &etcdAdmin{prefix: strings.TrimSuffix(u.Path, "/"), addrs: e.Upstreams}
	if a.prefix == "" {
		a.prefix = layout.EtcdDefaultPrefix
	}
	h := &Hooks{Revoke: a.revoke, Residue: a.residue, Orphans: a.orphans}
	if c := e.EtcdCluster; c != nil {
		h.Leader = c.Leader
	}
	return h
}

// etcdKV is a key-value of the gateway's range answer.
type etcdKV struct {
	Key            []byte `json:"key"`
	CreateRevision string `json:"create_revision"`
	Lease          string `json:"lease"`
}

type etcdRange struct {
	Kvs   []etcdKV `json:"kvs"`
	Count string   `json:"count"`
}

// call posts to the first member that answers.
func (a *etcdAdmin) call(ctx context.Context, path string, in, out any) error {
	var errs []error
	for _, addr := range a.addrs {
		err := testenv.EtcdCall(ctx, addr, path, in, out)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// rangeOf reads the keys under prefix p: the first by create revision
// (first), or only their count.
func (a *etcdAdmin) rangeOf(ctx context.Context, p string, first, countOnly bool) (etcdRange, error) {
	b64 := base64.StdEncoding.EncodeToString
	end := []byte(p)
	end[len(end)-1]++ // p ends with '/': no carry
	req := map[string]any{"key": b64([]byte(p)), "range_end": b64(end)}
	if first {
		req["sort_target"] = "CREATE"
		req["sort_order"] = "ASCEND"
		req["limit"] = 1
	}
	if countOnly {
		req["count_only"] = true
	}
	var r etcdRange
	err := a.call(ctx, "/v3/kv/range", req, &r)
	return r, err
}

func (a *etcdAdmin) count(ctx context.Context, p string) (int, error) {
	r, err := a.rangeOf(ctx, p, false, true)
	if err != nil || r.Count == "" {
		return 0, err
	}
	return strconv.Atoi(r.Count)
}

// revoke revokes the holder's etcd lease, as the server does when the
// holder stops renewing it: the lease and its key are gone.
func (a *etcdAdmin) revoke(ctx context.Context, name string) error {
	q := layout.EtcdQueue(a.prefix, name)
	r, err := a.rangeOf(ctx, q, true, false)
	if err != nil {
		return err
	}
	if len(r.Kvs) == 0 {
		return fmt.Errorf("backendtest: etcd: %q is not held (no key under %s)", name, q)
	}
	if r.Kvs[0].Lease == "" || r.Kvs[0].Lease == "0" {
		return fmt.Errorf("backendtest: etcd: the holder's key %s has no lease", r.Kvs[0].Key)
	}
	return a.call(ctx, "/v3/lease/revoke", map[string]string{"ID": r.Kvs[0].Lease}, nil)
}

// residue counts the keys of name's queue besides the holder's.
func (a *etcdAdmin) residue(ctx context.Context, name string) (int, error) {
	n, err := a.count(ctx, layout.EtcdQueue(a.prefix, name))
	return max(n-1, 0), err
}

// orphans waits up to 5s until no key is left under the prefix.
func (a *etcdAdmin) orphans(ctx context.Context) ([]string, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := a.rangeOf(ctx, a.prefix+"/", false, false)
		if err != nil {
			return nil, err
		}
		if len(r.Kvs) == 0 {
			return nil, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var left []string
			for _, kv := range r.Kvs {
				left = append(left, string(kv.Key))
			}
			return left, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
