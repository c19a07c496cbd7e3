package floor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// DialZooKeeper opens a ZooKeeper session on the servers of a zk:// URL
// and waits for it (until ctx ends, 10 s at most). The session times out
// 10 s after the connection is lost.
func DialZooKeeper(ctx context.Context, rawURL string) (*zk.Conn, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	conn, events, err := zk.Connect(strings.Split(u.Host, ","), 10*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		return nil, fmt.Errorf("floor: zookeeper: %w", err)
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() {
					for range events {
					}
				}()
				return conn, nil
			}
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("floor: zookeeper: no session: %w", ctx.Err())
		case <-timeout.C:
			conn.Close()
			return nil, errors.New("floor: zookeeper: no session within 10s")
		}
	}
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// openZooKeeper is the fenced floor, dlock's recipe with nothing but
// its uncontended path. A name has a persistent parent node (created once
// per connection and name, outside the steady state); an attempt is one
// multi that creates an ephemeral-sequential child and writes the parent.
// The reply's parent stat says the rest: its mzxid is the transaction's
// zxid, the child's czxid, dlock's token; its child count is 1 when ours
// is the only child, which makes it the holder. Otherwise the lock is
// held (or another attempt is in flight): our child is deleted and the
// attempt refused. The child's sequential name is the grant's own, so
// the release, a plain delete, cannot free a later grant; the session's
// end deletes it, so a holder that dies frees the lock.
func openZooKeeper(ctx context.Context, rawURL string, _ time.Duration) (*Lock, error) {
	c, err := DialZooKeeper(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	acl := zk.WorldACL(zk.PermAll)
	seen := map[string]bool{}
	return &Lock{
		try: func(ctx context.Context, name string) (*Grant, bool, error) {
			parent := zkNode("fenced", name)
			if !seen[parent] {
				if _, err := c.Create(parent, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					return nil, false, err
				}
				seen[parent] = true
			}
			r, err := c.Multi(
				&zk.CreateRequest{Path: parent + "/n-", Acl: acl, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: parent, Version: -1})
			if err != nil {
				return nil, false, err
			}
			node, st := r[0].String, r[1].Stat
			release := func(context.Context) error { return zkDelete(c, node) }
			if st.NumChildren != 1 {
				return nil, false, release(ctx)
			}
			return &Grant{token: uint64(st.Mzxid), release: release}, true, nil
		},
		close: func() error { c.Close(); return nil },
	}, nil
}

// openZooKeeperUnfenced is the floor zk.Lock is built on: create an
// ephemeral node to take (the session's end deletes it: a holder that
// dies frees the lock), delete it to free; no token. A node of a fixed
// name has no identity a delete can check (a new node's version is
// always 0), so the release is owner-safe only while the session that
// created it lasts: a release after the session changed (it expired,
// and the node with it) is refused without a request. (dlock's fenced
// recipe has no such window: its nodes' names are their grants'.)
func openZooKeeperUnfenced(ctx context.Context, rawURL string, _ time.Duration) (*Lock, error) {
	c, err := DialZooKeeper(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	acl := zk.WorldACL(zk.PermAll)
	return &Lock{
		try: func(ctx context.Context, name string) (*Grant, bool, error) {
			p := zkNode("unfenced", name)
			sid := c.SessionID()
			_, err := c.Create(p, nil, zk.FlagEphemeral, acl)
			if errors.Is(err, zk.ErrNodeExists) {
				return nil, false, nil
			}
			if err != nil {
				return nil, false, err
			}
			return &Grant{release: func(context.Context) error {
				if c.SessionID() != sid {
					return ErrNotHeld
				}
				return zkDelete(c, p)
			}}, true, nil
		},
		close: func() error { c.Close(); return nil },
	}, nil
}

// zkNode is the node of a name on a floor (fenced: a parent node;
// unfenced: the lock node), at the root, no '/' inside.
func zkNode(floor, name string) string { return "/" + url.PathEscape(keyPrefix+floor+":"+name) }

// zkDelete deletes a node; ErrNotHeld when it is gone.
func zkDelete(c *zk.Conn, path string) error {
	err := c.Delete(path, -1)
	if errors.Is(err, zk.ErrNoNode) {
		err = ErrNotHeld
	}
	return err
}

// zooKeeperRTT: exists("/") (a read the server answers alone), or, for
// write, setData on an ephemeral node of the session's own.
func zooKeeperRTT(ctx context.Context, rawURL string, write bool) (*RTT, error) {
	c, err := DialZooKeeper(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	r := &RTT{
		do:    func(context.Context) error { _, _, err := c.Exists("/"); return err },
		close: func() error { c.Close(); return nil },
	}
	if write {
		p := "/" + keyPrefix + "rtt-" + rand.Text()
		if _, err := c.Create(p, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			c.Close()
			return nil, fmt.Errorf("floor: zookeeper: %w", err)
		}
		r.do = func(context.Context) error { _, err := c.Set(p, nil, -1); return err }
	}
	return r, nil
}
