package zookeeper

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/quick"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
)

// TestVersionGuardProperty: a znode's data version wraps like a Java int
// (MaxInt32 → MinInt32 → … → -1 → 0) and -1 means "any version" to the
// server; whatever version a grant leaves the parent at, the guard the
// release checks is never -1, and is that version whenever it can be.
func TestVersionGuardProperty(t *testing.T) {
	if nextVersion(math.MaxInt32) != math.MinInt32 || nextVersion(-2) != -1 || nextVersion(-1) != 0 {
		t.Fatal("nextVersion does not wrap as the server's int does")
	}
	prop := func(v int32) bool {
		g, bump := guardFor(v)
		return g != anyVersion && bump == (v == anyVersion) && (bump || g == v) && (!bump || g == nextVersion(v))
	}
	for _, v := range []int32{math.MaxInt32 - 1, math.MaxInt32, math.MinInt32, math.MinInt32 + 1, -3, -2, -1, 0, 1} {
		if !prop(v) {
			t.Errorf("grant at parent version %d: guardFor %v", v, fmt.Sprint(guardFor(v)))
		}
	}
	// Every grant of a long run across the wrap.
	for v, i := int32(math.MaxInt32-3), 0; i < 10; v, i = nextVersion(v), i+1 {
		if !prop(v) {
			t.Errorf("grant at parent version %d: guardFor %v", v, fmt.Sprint(guardFor(v)))
		}
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 100000}); err != nil {
		t.Error(err)
	}
}

// TestBasicDeleteNeverChecksAnyVersion: a release whose guard is -1 (its
// grant's parent version wrapped to it) must not delete another grant's
// node, as a check against -1 would; and the holder's own release still
// works after that stray attempt touched the parent.
func TestBasicDeleteNeverChecksAnyVersion(t *testing.T) {
	srv, admin, prefix, ctx := setup(t, 30*time.Second)
	l := open(t, srv.URL, prefix, "recipe=basic")
	ls, err := l.Acquire(ctx, "wrap", nil)
	if err != nil {
		t.Fatal(err)
	}
	path := prefix + "/" + escapeName("wrap") + "/" + basicNode
	err = basicDelete(ctx, admin, path, anyVersion)
	if ok, _, _ := admin.Exists(path); !ok {
		t.Fatalf("a release guarded by version -1 deleted the current holder's node (err %v)", err)
	}
	if !errors.Is(err, zk.ErrBadVersion) {
		t.Errorf("a stale release guarded by -1: %v, want ErrBadVersion", err)
	}
	expectHeld(t, ctx, open(t, srv.URL, prefix, "recipe=basic"), "wrap", "after a stale release")
	if err := ls.Release(ctx); err != nil {
		t.Errorf("the holder's release after its parent was written: %v", err)
	}
	ls2, err := l.TryAcquire(ctx, "wrap", &dlock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ls2.Token() <= ls.Token() {
		t.Errorf("token %d not above %d", ls2.Token(), ls.Token())
	}
	_ = ls2.Release(ctx)
	assertNoOrphans(t, admin, prefix)
}
