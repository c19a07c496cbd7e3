package floor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
)

// openRedlock is the fenced Redlock floor: setFenced on every node at
// once, held when a quorum (N/2+1) granted it within the lease's validity
// (TTL - the time the quorum took - dlock's drift margin), the token the
// largest counter of the granting nodes, as dlock's Redlock has it; an
// attempt without a valid quorum takes back what it set, on every node.
func openRedlock(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error) {
	return openRedlockFloor(ctx, rawURL, ttl, fencedTake(ttl))
}

// openRedlockUnfenced is the floor redsync is built on: SET NX PX on
// every node at once, the same quorum and validity, no token.
func openRedlockUnfenced(ctx context.Context, rawURL string, ttl time.Duration) (*Lock, error) {
	return openRedlockFloor(ctx, rawURL, ttl, unfencedTake(ttl))
}

// vote is one node's answer to an attempt or a release.
type vote struct {
	token uint64
	ok    bool
	err   error
}

// openRedlockFloor opens one connection to each node of a
// redlock://[user:password@]h1,h2,h3[/db] URL. Every request goes to all
// nodes in parallel; the attempt returns as soon as a quorum granted
// (the release first waits for the answers still out, so that it deletes
// what they set).
func openRedlockFloor(ctx context.Context, rawURL string, ttl time.Duration, take take) (*Lock, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	hosts := strings.Split(u.Host, ",")
	nodes := make([]goredis.UniversalClient, 0, len(hosts))
	closeAll := func() error {
		var errs []error
		for _, c := range nodes {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	for _, h := range hosts {
		n := *u
		n.Scheme, n.Host, n.RawQuery = "redis", h, ""
		c, err := redisConn(n.String())
		if err == nil {
			nodes = append(nodes, c)
			err = loadScripts(ctx, c)
		}
		if err != nil {
			closeAll()
			return nil, err
		}
	}
	quorum := len(nodes)/2 + 1
	validity := ttl - driver.Drift(ttl)
	// Each node has a goroutine of its own, kept for the floor's life,
	// that runs the requests to it: a goroutine started per request would
	// grow its stack down go-redis's call path every time (a quarter of a
	// client's CPU), which dlock's Redlock does not pay either (its
	// crew). The floor is used by one goroutine at a time, so a node has
	// at most an attempt's late answer and a release queued.
	calls := make([]chan func(), len(nodes))
	for i := range nodes {
		calls[i] = make(chan func(), 2)
		go func() {
			for f := range calls[i] {
				f()
			}
		}()
	}
	stop := func() error {
		err := closeAll()
		for _, c := range calls {
			close(c)
		}
		return err
	}
	// all runs op on every node at once; the answers come on the channel,
	// buffered for every one of them.
	all := func(ctx context.Context, op func(ctx context.Context, c goredis.UniversalClient) vote) <-chan vote {
		out := make(chan vote, len(nodes))
		for i, c := range nodes {
			calls[i] <- func() { out <- op(ctx, c) }
		}
		return out
	}
	// free deletes key where it is val's, on every node, once the answers
	// still out (late) are in; it counts the nodes that deleted it.
	free := func(ctx context.Context, key, val string, late <-chan vote, nlate int) (int, error) {
		for range nlate {
			<-late
		}
		answers := all(ctx, func(ctx context.Context, c goredis.UniversalClient) vote {
			ok, err := freeOn(ctx, c, key, val)
			return vote{ok: ok, err: err}
		})
		freed := 0
		var errs []error
		for range nodes {
			v := <-answers
			if v.ok {
				freed++
			}
			errs = append(errs, v.err)
		}
		return freed, errors.Join(errs...)
	}
	next := values()
	return &Lock{
		try: func(ctx context.Context, name string) (*Grant, bool, error) {
			start := time.Now()
			key, val := keyPrefix+name, next()
			// The requests run to their answer whatever ctx does: what
			// they did on a node is known before it is taken back.
			answers := all(context.WithoutCancel(ctx), func(ctx context.Context, c goredis.UniversalClient) vote {
				token, ok, err := take(ctx, c, key, val)
				return vote{token: token, ok: ok, err: err}
			})
			granted, answered := 0, 0
			var token uint64
			var errs []error
			for answered < len(nodes) && granted < quorum && answered-granted <= len(nodes)-quorum {
				v := <-answers
				answered++
				switch {
				case v.err != nil:
					errs = append(errs, v.err)
				case v.ok:
					granted++
					token = max(token, v.token)
				}
			}
			if granted >= quorum && time.Since(start) < validity {
				return &Grant{token: token, release: func(ctx context.Context) error {
					freed, err := free(ctx, key, val, answers, len(nodes)-answered)
					answered = len(nodes)
					switch {
					case freed >= quorum:
						return nil
					case err != nil:
						return err
					}
					return ErrNotHeld
				}}, true, nil
			}
			// No valid quorum: take back what this attempt set. Refused
			// (held, or votes split) unless failed nodes left no quorum.
			_, ferr := free(context.WithoutCancel(ctx), key, val, answers, len(nodes)-answered)
			if len(errs) > len(nodes)-quorum {
				return nil, false, fmt.Errorf("floor: redlock: %w", errors.Join(append(errs, ferr)...))
			}
			return nil, false, nil
		},
		close: stop,
	}, nil
}
