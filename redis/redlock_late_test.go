package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestRedlockLateRegistration: a Redlock waiter whose attempt is refused
// by a quorum returns when its context ends, while one node's request,
// which registers the Locker in the name's waiter queue, is still on its
// way. The waiter's leave must not overtake it: the Locker leaves the
// queue only once every node has answered, so that no queue entry is left
// behind (for regLifetime) on the late node. It fails when the failed
// attempt's registration is recorded before the late answer (the leave
// then reaches the node first, and the late request registers again).
func TestRedlockLateRegistration(t *testing.T) {
	nodes := testenv.NewRedisNodes(t, 3, nil)
	tg := redlockOn(t, nodes)
	ctx := testCtx(t)
	holder := open(t, ctx, tg.url)
	// A node timeout well beyond the late request's delay: the request is
	// late, not failed.
	w := open(t, ctx, tg.url+"?node_timeout=5s")
	name := uniqueName(t)
	held, err := holder.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	// Node 2's first registering request waits until the waiter has
	// returned and its leave had time to reach every node.
	late := 2
	blocked, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(i int, registering bool) {
		if i != late || !registering {
			return
		}
		first := false
		once.Do(func() { first = true })
		if first {
			close(blocked)
			<-unblock
		}
	}
	testBeforeNodeAcquire.Store(&hook)
	defer testBeforeNodeAcquire.Store(nil)

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := w.Acquire(wctx, name, nil)
		done <- err
	}()
	select {
	case <-blocked:
	case err := <-done:
		t.Fatalf("Acquire returned before a registering attempt: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no registering attempt within 10s")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	// What a leave sent now does on the other nodes, it does before the
	// late request reaches its node.
	time.Sleep(300 * time.Millisecond)
	close(unblock)

	queue := keysFor(DefaultPrefix, name).queue
	deadline := time.Now().Add(regLifetime / 2)
	for {
		var left []int
		for i, r := range tg.raw {
			n, err := r.Exists(ctx, queue).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				left = append(left, i)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter queue %s is left on nodes %v after the waiter returned and every node answered", queue, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
