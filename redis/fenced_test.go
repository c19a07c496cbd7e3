package redis

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestFencedWrites: the resource-side fence on a single server and on a
// Cluster, with tokens that a double (a Lua number) would confuse.
func TestFencedWrites(t *testing.T) {
	for _, tg := range []*target{singleTarget(t), clusterTarget(t)} {
		t.Run(tg.name, func(t *testing.T) {
			ctx := testenv.Context(t, 30*time.Second)
			c := tg.raw[0]
			key := "fenced:" + uniqueName(t)
			set := func(token uint64, v string) bool {
				t.Helper()
				ok, err := FencedSet(ctx, c, key, token, "v", v)
				if err != nil {
					t.Fatalf("FencedSet(token %d): %v", token, err)
				}
				return ok
			}
			get := func() string {
				t.Helper()
				v, err := c.HGet(ctx, key, "v").Result()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			const big = 1 << 53 // 2^53+1 and 2^53 are one double
			steps := []struct {
				token uint64
				want  bool
			}{
				{7, true}, {7, true}, {6, false}, {10, true}, {9, false},
				{big, true}, {big + 1, true}, {big, false},
				{math.MaxUint64 - 1, true}, {big + 1, false}, {math.MaxUint64, true}, {math.MaxUint64 - 1, false},
			}
			last := ""
			for _, s := range steps {
				v := strconv.FormatUint(s.token, 10)
				if got := set(s.token, v); got != s.want {
					t.Fatalf("FencedSet(token %d) after %s: applied=%v, want %v", s.token, last, got, s.want)
				}
				if s.want {
					last = v
				}
				if got := get(); got != last {
					t.Fatalf("after token %d: value %q, want %q", s.token, got, last)
				}
			}
			if f, _ := c.HGet(ctx, key, FenceField).Result(); f != last {
				t.Fatalf("fence field %q, want %q", f, last)
			}

			// A counter: a stale decrement changes nothing.
			ckey := key + ":stock"
			if n, ok, err := FencedIncrBy(ctx, c, ckey, 5, "qty", 10); err != nil || !ok || n != 10 {
				t.Fatalf("FencedIncrBy(5, +10) = %d, %v, %v", n, ok, err)
			}
			if n, ok, err := FencedIncrBy(ctx, c, ckey, 6, "qty", -1); err != nil || !ok || n != 9 {
				t.Fatalf("FencedIncrBy(6, -1) = %d, %v, %v", n, ok, err)
			}
			if n, ok, err := FencedIncrBy(ctx, c, ckey, 5, "qty", -1); err != nil || ok || n != 0 {
				t.Fatalf("stale FencedIncrBy(5, -1) = %d, %v, %v; want refused", n, ok, err)
			}
			if q, _ := c.HGet(ctx, ckey, "qty").Result(); q != "9" {
				t.Fatalf("qty %q after a stale decrement, want 9", q)
			}
		})
	}
}

// TestFencedBadInput: bad calls are refused before anything is written.
func TestFencedBadInput(t *testing.T) {
	tg := singleTarget(t)
	ctx := testenv.Context(t, 30*time.Second)
	c := tg.raw[0]
	key := "fenced:" + uniqueName(t)
	for _, bad := range []struct {
		name  string
		key   string
		token uint64
		field string
	}{
		{"token 0", key, 0, "v"},
		{"empty key", "", 1, "v"},
		{"the fence field", key, 1, FenceField},
	} {
		if ok, err := FencedSet(ctx, c, bad.key, bad.token, bad.field, "x"); err == nil || ok {
			t.Errorf("%s: FencedSet = %v, %v; want an error", bad.name, ok, err)
		}
	}
	if _, ok, err := FencedIncrBy(ctx, c, key, 1, "v", 1); err != nil || !ok {
		t.Fatalf("FencedIncrBy: %v %v", ok, err)
	}
	// A non-integer field: HINCRBY's error, and the fence did not move.
	if _, err := FencedSet(ctx, c, key, 2, "s", "text"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := FencedIncrBy(ctx, c, key, 3, "s", 1); err == nil || ok {
		t.Fatalf("HINCRBY on text: %v %v; want an error", ok, err)
	}
	if f, _ := c.HGet(ctx, key, FenceField).Result(); f != "2" {
		t.Fatalf("fence %q after a failed write, want 2", f)
	}
	if n, _ := c.Exists(ctx, key+"x").Result(); n != 0 {
		t.Fatal("a refused call wrote a key")
	}
	if _, err := FencedSet(ctx, nil, key, 1, "v", "x"); err == nil {
		t.Fatal("nil client accepted")
	}
}

// TestPausedHolderFencedWrite: a holder paused past its TTL is replaced,
// and its fenced write after the new holder's is rejected (the same check
// as the SQL drivers' FencedUpdate).
func TestPausedHolderFencedWrite(t *testing.T) {
	for _, tg := range []*target{singleTarget(t), clusterTarget(t)} {
		t.Run(tg.name, func(t *testing.T) {
			key := "fenced:" + uniqueName(t)
			sqltest.PausedHolder(t, tg.url, 500*time.Millisecond, time.Millisecond,
				func(ctx context.Context, token uint64) (bool, error) {
					return FencedSet(ctx, tg.raw[0], key, token, "owner", strconv.FormatUint(token, 10))
				})
		})
	}
}
