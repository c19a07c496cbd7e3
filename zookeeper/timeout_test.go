package zookeeper

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// FuzzMillis: a duration becomes ZooKeeper's int32 milliseconds without
// truncation to zero, wrapping or overflow, or is refused.
func FuzzMillis(f *testing.F) {
	for _, d := range []int64{0, 1, -1, int64(time.Millisecond), int64(time.Millisecond) + 1,
		int64(DefaultSessionTimeout), int64(MaxSessionTimeout), int64(MaxSessionTimeout) + 1,
		int64(600 * time.Hour), int64(1<<32*time.Millisecond + 10*time.Second), math.MaxInt64, math.MinInt64} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		ms, ok := millis(d)
		if want := d > 0 && d <= MaxSessionTimeout; ok != want {
			t.Fatalf("millis(%v) ok=%v, want %v", d, ok, want)
		}
		err := checkSessionTimeout(d)
		if (err == nil) != (ok || d == 0) || (err != nil && !errors.Is(err, driver.ErrInvalidOption)) {
			t.Fatalf("checkSessionTimeout(%v) = %v (millis ok=%v)", d, err, ok)
		}
		if !ok {
			return
		}
		// Rounded up, by less than a millisecond, never to 0 or below.
		back := fromMillis(ms)
		if ms <= 0 || back < d || back-d >= time.Millisecond {
			t.Fatalf("millis(%v) = %d (back %v)", d, ms, back)
		}
		// What go-zookeeper sends, int32(d/ms), cannot have wrapped.
		if sent := int32(d / time.Millisecond); int64(sent) != int64(d/time.Millisecond) || sent < 0 {
			t.Fatalf("a duration millis accepts, %v, wraps in go-zookeeper's conversion to %d", d, sent)
		}
	})
}

// FuzzTrackerConnectResponse feeds arbitrary connect responses (as a
// hostile or broken server could send) to the tracker: the negotiated
// timeout it records is never negative and never beyond what an int32 of
// milliseconds can say, and parsing never panics.
func FuzzTrackerConnectResponse(f *testing.F) {
	resp := func(ms int32, sid uint64) []byte {
		b := make([]byte, 4+36)
		binary.BigEndian.PutUint32(b, 36)
		binary.BigEndian.PutUint32(b[8:], uint32(ms))
		binary.BigEndian.PutUint64(b[12:], sid)
		return b
	}
	f.Add(resp(10000, 1), 3)
	f.Add(resp(-1, 1), 1)
	f.Add(resp(math.MinInt32, 7), 40)
	f.Add(resp(math.MaxInt32, 7), 5)
	f.Add(resp(4000, 0), 2)
	f.Add([]byte{0, 0, 0, 2, 1}, 1)
	f.Fuzz(func(t *testing.T, b []byte, chunk int) {
		tr := newTracker()
		c := &trackedConn{t: tr, pending: make(map[int32][]int64)}
		c.wrote = true
		chunk = max(1, chunk%64)
		for p := b; len(p) > 0; {
			k := min(chunk, len(p))
			c.scan(p[:k])
			p = p[k:]
		}
		if got := tr.negotiated(); got < 0 || got > MaxSessionTimeout {
			t.Fatalf("negotiated timeout %v from %x", got, b)
		}
	})
}

// TestSessionTimeoutNegotiated: the Locker uses the timeout the server
// granted, not the one asked for, for ReleaseOnCrash and loss detection;
// a timeout go-zookeeper would wrap is refused at once, before any dial.
func TestSessionTimeoutNegotiated(t *testing.T) {
	srv, _, prefix, ctx := setup(t, 60*time.Second)
	// Far above the server's maximum (testenv sets maxSessionTimeout to
	// 60s): the server grants its maximum.
	l := open(t, srv.URL, prefix, "session_timeout=1h")
	d := driverOf(l)
	neg := d.s.tr.negotiated()
	if neg <= 0 || neg >= time.Hour {
		t.Fatalf("negotiated session timeout %v for 1h asked: the server should have clamped it", neg)
	}
	if !srv.External() && neg != time.Minute {
		t.Errorf("negotiated %v, want the server's maximum of 60s", neg)
	}
	caps := l.Capabilities()
	if caps.ReleaseOnCrash != neg || d.s.sessionTimeout() != neg {
		t.Errorf("ReleaseOnCrash %v, loss detection's timeout %v; want the negotiated %v, not the requested 1h", caps.ReleaseOnCrash, d.s.sessionTimeout(), neg)
	}
	if caps.MinTTL != dlock.MinTTL || caps.MaxTTL != MaxSessionTimeout {
		t.Errorf("TTL range [%v, %v]", caps.MinTTL, caps.MaxTTL)
	}
	// The loss deadline is the negotiated timeout after the last reply.
	if ls, err := l.TryAcquire(ctx, "neg", &dlock.AcquireOptions{TTL: caps.MaxTTL}); err != nil {
		t.Errorf("TTL of MaxTTL %v: %v", caps.MaxTTL, err)
	} else {
		d.s.mu.Lock()
		dl, ok := d.s.deadlineLocked()
		d.s.mu.Unlock()
		if left := time.Until(dl); !ok || left > neg || left < neg/2 {
			t.Errorf("the lease's loss deadline is %v away (ok=%v), want within the negotiated %v", left, ok, neg)
		}
		_ = ls.Release(ctx)
	}
	if _, err := l.TryAcquire(ctx, "neg", &dlock.AcquireOptions{TTL: caps.MaxTTL + time.Millisecond}); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("TTL above MaxTTL: %v, want ErrInvalidOption", err)
	}

	// int32(d/ms) would wrap: to a negative timeout (600h) or to 10s
	// (2^32ms + 10s). Both are refused, quickly, naming the range.
	for _, st := range []string{"600h", "4294977296ms", "2562047h"} {
		start := time.Now()
		l, err := dlock.Open(ctx, srv.URL+prefix+"?connect_timeout=5s&session_timeout="+st)
		if err == nil {
			_ = l.Close()
			t.Errorf("session_timeout=%s: opened (negotiated %v), want ErrInvalidOption", st, driverOf(l).s.tr.negotiated())
			continue
		}
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "int32 milliseconds") || time.Since(start) > 3*time.Second { // not connect_timeout (go-zookeeper's Close of a conn with no session takes 1s)
			t.Errorf("session_timeout=%s: %v after %v, want a quick ErrInvalidOption naming the range", st, err, time.Since(start))
		}
	}
	if bad, err := OpenLocker(d.conn, &Options{Prefix: prefix, SessionTimeout: 600 * time.Hour}); bad != nil || !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "int32 milliseconds") {
		t.Errorf("OpenLocker with SessionTimeout 600h: %v, %v, want a nil Locker and ErrInvalidOption naming the range", bad, err)
	}
}
