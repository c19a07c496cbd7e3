package redis

import (
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// FuzzMillis: the millisecond count sent to the server (SET PX, PEXPIRE)
// is never below the TTL asked for, at most one millisecond above it, and
// never wraps; a count read back (PTTL) converts to a Duration that does
// not wrap either.
func FuzzMillis(f *testing.F) {
	for _, d := range []int64{1, 999_999, 1_000_000, 1_000_001, 1_500_000, int64(dlock.MinTTL),
		int64(MaxTTL), int64(MaxTTL) + 1, math.MaxInt64 - 1, math.MaxInt64} {
		f.Add(d)
	}
	ms := big.NewInt(int64(time.Millisecond))
	f.Fuzz(func(t *testing.T, n int64) {
		if n < 0 {
			n = -(n + 1) // every positive value reachable, MaxInt64 included
		}
		if n == 0 {
			n = 1
		}
		d := time.Duration(n)
		got := millis(d)
		sent := new(big.Int).Mul(big.NewInt(got), ms) // exact, no wrap
		want := big.NewInt(n)
		if got <= 0 || sent.Cmp(want) < 0 || new(big.Int).Sub(sent, want).Cmp(ms) >= 0 {
			t.Fatalf("millis(%dns) = %d: want the least whole ms count >= the TTL", n, got)
		}
		if d <= MaxTTL && got > maxMillis {
			t.Fatalf("millis(%v) = %d, above maxMillis %d for a TTL within MaxTTL", d, got, int64(maxMillis))
		}
		back := fromMillis(n)
		if back < 0 || (n <= maxMillis && back != time.Duration(n)*time.Millisecond) ||
			(n > maxMillis && back != time.Duration(math.MaxInt64)) {
			t.Fatalf("fromMillis(%d) = %v: want it exact or saturated", n, back)
		}
		if d <= MaxTTL && fromMillis(got) < d {
			t.Fatalf("fromMillis(millis(%v)) = %v: the round trip lost time", d, fromMillis(got))
		}
	})
}

// TestTTLRange: every deployment declares [dlock.MinTTL, MaxTTL] (Redlock
// [redlockMinTTL, MaxTTL]: its quorum must fit in the validity); a lease
// of MaxTTL without keep-alive is held on the server with a PTTL of about
// MaxTTL (no overflow, no Lua error) and excludes others; MaxTTL+1ns and
// the largest Duration are refused before any server call;.
func TestTTLRange(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target) {
		ctx := testCtx(t)
		a, b := open(t, ctx, tg.url), open(t, ctx, tg.url)
		wantMin := dlock.MinTTL
		if strings.HasPrefix(tg.url, "redlock://") {
			wantMin = redlockMinTTL
		}
		if c := a.Capabilities(); c.MinTTL != wantMin || c.MaxTTL != MaxTTL {
			t.Fatalf("Capabilities TTL range [%v, %v], want [%v, %v]", c.MinTTL, c.MaxTTL, wantMin, MaxTTL)
		}
		name := uniqueName(t)
		for _, ttl := range []time.Duration{MaxTTL + 1, time.Duration(math.MaxInt64)} {
			if _, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: ttl, NoKeepAlive: true}); !errors.Is(err, dlock.ErrInvalidOption) {
				t.Errorf("TTL %v: %v, want ErrInvalidOption", ttl, err)
			}
		}
		if n, err := tg.del(ctx, keysFor(DefaultPrefix, name).fence); err != nil || n != 0 {
			t.Errorf("a refused TTL reached the server: %d fence keys, %v", n, err)
		}
		ls, err := a.TryAcquire(ctx, name, &dlock.AcquireOptions{TTL: MaxTTL, NoKeepAlive: true})
		if err != nil {
			t.Fatalf("TTL MaxTTL (%v): %v", MaxTTL, err)
		}
		if _, err := b.TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryAcquire of a lock held for MaxTTL: %v, want ErrNotAcquired", err)
		}
		info, err := b.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if min := MaxTTL - time.Hour; !info.Held || info.TTL < min {
			t.Errorf("Inspect of a MaxTTL lease = %+v, want held with a TTL over %v", info, min)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}

		// The driver declares the same range (the portable layer relies on it).
		drv := openDriver(t, ctx, tg)
		if c := drv.Capabilities(); c.MinTTL != wantMin || c.MaxTTL != MaxTTL {
			t.Errorf("driver TTL range [%v, %v]", c.MinTTL, c.MaxTTL)
		}
	})
}
