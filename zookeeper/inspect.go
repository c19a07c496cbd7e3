package zookeeper

import (
	"context"
	"errors"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/driver"
)

func (l *locker) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := l.check(); err != nil {
		return driver.Info{}, err
	}
	parent := l.parent(name)
	if l.cfg.recipe == RecipeBasic {
		data, st, err := getNode(ctx, l.conn, parent+"/"+basicNode)
		if errors.Is(err, zk.ErrNoNode) {
			return driver.Info{Waiters: -1}, nil
		}
		if err != nil {
			return driver.Info{}, l.wrapErr(err)
		}
		_, owner, _ := strings.Cut(string(data), "\n")
		return driver.Info{Held: true, Owner: owner, Fence: uint64(st.Czxid), Waiters: -1}, nil
	}
	for {
		kids, err := children(ctx, l.conn, parent)
		if errors.Is(err, zk.ErrNoNode) {
			return driver.Info{}, nil
		}
		if err != nil {
			return driver.Info{}, l.wrapErr(err)
		}
		if len(kids) == 0 {
			return driver.Info{}, nil
		}
		q := sortQueue(kids)
		data, st, err := getNode(ctx, l.conn, parent+"/"+q[0].name)
		if errors.Is(err, zk.ErrNoNode) {
			continue // the holder left meanwhile: look again
		}
		if err != nil {
			return driver.Info{}, l.wrapErr(err)
		}
		return driver.Info{Held: true, Owner: string(data), Fence: uint64(st.Czxid), Waiters: len(q) - 1}, nil
	}
}
