package redis

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/netproxy"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestRedlockNodeKilled: with one of three nodes killed mid-run, a held
// lease keeps refreshing on the quorum left, new grants and wake-ups
// work, and the node can come back; with two of three gone, nothing is
// granted and the holder's lease ends.
func TestRedlockNodeKilled(t *testing.T) {
	ctx := testCtx(t)
	nodes := testenv.NewRedisNodes(t, 3, nil)
	tg := redlockOn(t, nodes)
	a, b := open(t, ctx, tg.url), open(t, ctx, tg.url)
	name := uniqueName(t)
	held, err := a.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // several keep-alive rounds, more than a TTL
	if err := held.Err(); err != nil {
		t.Fatalf("lease lost with a quorum of nodes alive: %v", err)
	}
	if _, err := b.TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of the held lock with a node down: %v, want ErrNotAcquired", err)
	}
	// A waiter is woken by the release published on the nodes alive.
	got := make(chan error, 1)
	go func() {
		ls, err := b.Acquire(ctx, name, nil)
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release with a node down: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter with a node down: %v", err)
	}
	for i := range 20 {
		ls, err := a.TryAcquire(ctx, name+"/"+strconv.Itoa(i), nil)
		if err != nil {
			t.Fatalf("grant %d with a node down: %v", i, err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The node comes back (empty: no persistence) and takes part again.
	if err := nodes[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	back := false
	for deadline := time.Now().Add(10 * time.Second); !back && time.Now().Before(deadline); {
		ls, err := a.TryAcquire(ctx, name, nil)
		if err != nil {
			t.Fatalf("after the node came back: %v", err)
		}
		n, err := tg.raw[0].Exists(ctx, keysFor(DefaultPrefix, name).lock).Result()
		back = err == nil && n == 1
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !back {
		t.Error("the restarted node never took part in a grant")
	}

	// Two of three down: no quorum.
	held, err = a.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	nodes[1].Kill()
	nodes[2].Kill()
	if _, err := b.TryAcquire(ctx, name+"/none", nil); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with two of three nodes down: %v, want a failure that is not ErrNotAcquired", err)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), dlock.ErrLockLost) {
			t.Errorf("Err = %v, want ErrLockLost", held.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a lease that cannot be refreshed on a quorum did not end")
	}
}

// TestRestartWithPersistence: a server that persists every write
// (appendfsync always) keeps the fence counter and a live lock across a
// kill and restart; the driver reloads its scripts (NOSCRIPT fallback).
func TestRestartWithPersistence(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.NewRedis(t, &testenv.RedisOptions{Persistence: true})
	l := open(t, ctx, srv.URL)
	name := uniqueName(t)
	first, err := l.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, ctx, srv.URL).TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("after a restart the persisted lock is free: %v", err)
	}
	if err := held.Refresh(ctx); err != nil {
		t.Errorf("Refresh after a restart (script cache flushed): %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := l.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= held.Token() {
		t.Errorf("token %d after a restart, %d before: the persisted counter went back", next.Token(), held.Token())
	}
}

// TestRestartWithoutPersistence: a server without persistence loses the
// lock and the fence counter on a restart (why Capabilities does not
// claim TokensSurviveRestart); the holder is told through its deadline.
func TestRestartWithoutPersistence(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.NewRedis(t, nil)
	l := open(t, ctx, srv.URL)
	name := uniqueName(t)
	held, err := l.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), dlock.ErrLockLost) {
			t.Errorf("Err = %v, want ErrLockLost", held.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not end while its server was down")
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err := l.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	defer ls.Release(ctx)
	if ls.Token() != 1 {
		t.Errorf("token %d after a restart without persistence, want 1 (the counter is gone)", ls.Token())
	}
}

// TestEvictedKeyLossSignalled: under maxmemory with volatile-ttl the lock
// key (the only key with a TTL) is evicted first; the holder's next
// refresh finds it gone and the lease ends with ErrLockLost.
func TestEvictedKeyLossSignalled(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.NewRedis(t, &testenv.RedisOptions{Config: []string{"maxmemory 4mb", "maxmemory-policy volatile-ttl"}})
	l := open(t, ctx, srv.URL)
	name := uniqueName(t)
	held, err := l.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	raw := rawClient(t, srv.Addr)
	junk := strings.Repeat("x", 16<<10)
	evicted := false
	for i := 0; i < 10000 && !evicted; i++ {
		if err := raw.Set(ctx, "junk:"+strconv.Itoa(i), junk, 0).Err(); err != nil && !strings.Contains(err.Error(), "OOM") {
			t.Fatal(err)
		}
		n, err := raw.Exists(ctx, keysFor(DefaultPrefix, name).lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		evicted = n == 0
	}
	if !evicted {
		t.Fatal("the lock key was never evicted")
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), dlock.ErrLockLost) {
			t.Errorf("Err = %v, want ErrLockLost", held.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("eviction of the lock key not signalled")
	}
}

// TestRedlockLateQuorumSaysSo: a quorum missed because nodes do not answer
// in time is not acquired (the portable layer retries), and the error says
// why instead of claiming that another owner holds the lock, which no node
// said.
func TestRedlockLateQuorumSaysSo(t *testing.T) {
	ctx := testCtx(t)
	nodes := testenv.NewRedisNodes(t, 3, nil)
	addrs := []string{nodes[0].Addr}
	var proxies []*netproxy.Proxy
	for _, s := range nodes[1:] {
		p := netproxy.ForTest(t, s.Addr)
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	l := open(t, ctx, "redlock://"+strings.Join(addrs, ","))
	name := uniqueName(t)
	if ls, err := l.TryAcquire(ctx, name, nil); err != nil {
		t.Fatalf("TryAcquire with every node answering: %v", err)
	} else if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.Pause()
	}
	_, err := l.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: time.Second})
	for _, p := range proxies {
		p.Resume()
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with two of three nodes silent: %v, want ErrNotAcquired", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "held by another owner") || !strings.Contains(msg, "no quorum") || !strings.Contains(msg, "2 answered late") {
		t.Errorf("error %q: want it to say the quorum was missed by late nodes, not that another owner holds the lock", msg)
	}
}
