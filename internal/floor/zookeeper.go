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

// openZooKeeper: create an ephemeral node to take (the session's end
// deletes it: a holder that dies frees the lock), delete it to free.
func openZooKeeper(ctx context.Context, rawURL string, _ time.Duration) (*Lock, error) {
	c, err := DialZooKeeper(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	acl := zk.WorldACL(zk.PermAll)
	return &Lock{
		try: func(ctx context.Context, name string) (func(context.Context) error, bool, error) {
			p := "/" + url.PathEscape(keyPrefix+name) // one node at the root: no '/' inside
			_, err := c.Create(p, nil, zk.FlagEphemeral, acl)
			if errors.Is(err, zk.ErrNodeExists) {
				return nil, false, nil
			}
			if err != nil {
				return nil, false, err
			}
			return func(context.Context) error {
				err := c.Delete(p, -1)
				if errors.Is(err, zk.ErrNoNode) {
					err = ErrNotHeld
				}
				return err
			}, true, nil
		},
		close: func() error { c.Close(); return nil },
	}, nil
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
