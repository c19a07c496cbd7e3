package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testenv"
)

// grantValue returns the value a driver lease holds the lock key with.
func grantValue(t *testing.T, ls driver.Lease) string {
	t.Helper()
	switch ls := ls.(type) {
	case *lease:
		return ls.value
	case *rlease:
		return ls.value
	}
	t.Fatalf("lease of type %T", ls)
	return ""
}

// TestGrantValuesUnique: the values that make release and refresh
// owner-safe never repeat: not within one Locker (grant after grant), not
// between two Lockers of one process, not after a Locker is closed and
// opened again (a restart). Each value is what the server holds, and
// ends with "|" and the Request.Owner.
func TestGrantValuesUnique(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		name := uniqueName(t)
		seen := make(map[string]string)
		prefixes := make(map[string]bool)
		grants := func(who string) {
			d, err := openURL(ctx, tg.url)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			var first string
			for i := range 20 {
				owner := who + "-" + strconv.Itoa(i)
				ls, err := d.TryAcquire(ctx, driver.Request{Name: name, TTL: 5 * time.Second, Owner: owner})
				if err != nil {
					t.Fatal(err)
				}
				v := grantValue(t, ls)
				// A quorum of the servers (all of one) holds it: a
				// Redlock grant does not wait for the last nodes.
				holding := 0
				for _, c := range tg.raw {
					if got, _ := c.Get(ctx, keysFor(DefaultPrefix, name).lock).Result(); got == v {
						holding++
					}
				}
				if holding < len(tg.raw)/2+1 {
					t.Errorf("%s: %d of %d servers hold the lease's value %q", who, holding, len(tg.raw), v)
				}
				if err := ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
				id, o, ok := strings.Cut(v, "|")
				if !ok || o != owner {
					t.Errorf("%s: value %q does not end with |%s", who, v, owner)
				}
				if prev, dup := seen[id]; dup {
					t.Errorf("%s: grant value %q repeats one of %s", who, id, prev)
				}
				seen[id] = who
				if i == 0 {
					first = id
				}
			}
			// The Locker's random part: the longest common prefix of its
			// first and last values, at least the 26 base32 characters of
			// crypto/rand.Text (130 bits).
			last := ""
			for id, w := range seen {
				if w == who && id != first {
					last = id
					break
				}
			}
			n := 0
			for n < len(first) && n < len(last) && first[n] == last[n] {
				n++
			}
			if n < 26 {
				t.Errorf("%s: values %q and %q share %d characters, want a random prefix of at least 26", who, first, last, n)
			}
			prefixes[first[:26]] = true
		}
		grants("locker A")
		grants("locker B")       // a second Locker of the same process
		grants("locker A again") // as after a restart
		if len(prefixes) != 3 {
			t.Errorf("three Lockers drew %d distinct random prefixes", len(prefixes))
		}
	})
}

// commandCalls returns how many times the server ran cmd (INFO
// commandstats; a script's redis.call counts too).
func commandCalls(t *testing.T, ctx context.Context, c *goredis.Client, cmd string) int64 {
	t.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls, err := testenv.RedisCommandCalls(info)
	if err != nil {
		t.Fatal(err)
	}
	return calls[cmd]
}

// TestReleaseWithoutWaiterDoesNotPublish: a release publishes only when a
// Locker waits for the name (its registration is in the name's queue): on
// a server of its own, the PUBLISH count stays still over acquire/release
// cycles with no waiter, and moves by one (the grant) when one waits.
func TestReleaseWithoutWaiterDoesNotPublish(t *testing.T) {
	ctx := testCtx(t)
	raw, d, url := serverOfItsOwn(t, ctx)
	name := uniqueName(t)
	req := driver.Request{Name: name, TTL: 5 * time.Second}
	before := commandCalls(t, ctx, raw, "publish")
	for range 10 {
		ls, err := d.TryAcquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := commandCalls(t, ctx, raw, "publish") - before; n != 0 {
		t.Errorf("10 releases with no waiter published %d times", n)
	}

	// A waiter: another Locker's blocking Acquire queues behind the holder.
	held, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	w, err := openURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got := make(chan error, 1)
	go func() {
		ls, err := w.(driver.Blocker).Acquire(ctx, req)
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	k := keysFor(DefaultPrefix, name)
	for raw.Exists(ctx, k.waiters).Val() == 0 {
		time.Sleep(time.Millisecond)
	}
	before = commandCalls(t, ctx, raw, "publish")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := commandCalls(t, ctx, raw, "publish") - before; n != 1 {
		t.Errorf("a release with one waiter published %d times, want 1", n)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter was not granted")
	}
}

// TestScriptCacheFlushed: after SCRIPT FLUSH the driver's EVALSHA falls
// back to EVAL (which caches the script again) for acquire, refresh and
// release.
func TestScriptCacheFlushed(t *testing.T) {
	ctx := testCtx(t)
	raw, d, _ := serverOfItsOwn(t, ctx)
	req := driver.Request{Name: uniqueName(t), TTL: 5 * time.Second}
	flush := func() {
		if err := raw.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	ls, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := ls.Refresh(ctx, 5*time.Second); err != nil {
		t.Errorf("refresh after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := ls.Release(ctx); err != nil {
		t.Errorf("release after SCRIPT FLUSH: %v", err)
	}
	if n, err := raw.Exists(ctx, keysFor(DefaultPrefix, req.Name).lock).Result(); err != nil || n != 0 {
		t.Errorf("after release the key exists: %d, %v", n, err)
	}
}

// serverOfItsOwn starts a Redis server for one test, whose counters no
// other test moves, and returns a raw client and a driver on it (both end
// with the test) and its URL.
func serverOfItsOwn(t *testing.T, ctx context.Context) (*goredis.Client, driver.Locker, string) {
	t.Helper()
	srv := testenv.NewRedis(t, nil)
	raw := rawClient(t, srv.Addr)
	d, err := openURL(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return raw, d, srv.URL
}
