package bench

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/memory"
)

// strictNames is a driver with name rules of its own.
type strictNames struct{ driver.Locker }

func (strictNames) ValidateName(name string) error {
	if strings.HasPrefix(name, "bad") {
		return errors.New("strict: names may not start with bad")
	}
	return nil
}

// TestCountAttemptsKeepsTheDriversInterfaces: the wrapper that counts a
// dlock row's failed attempts keeps what the portable layer looks for on
// the hot path (the driver's name rules, its native queue, its release
// notices), and counts the attempts that found the lock taken.
func TestCountAttemptsKeepsTheDriversInterfaces(t *testing.T) {
	ctx := context.Background()
	ns := memory.NewNamespace()
	inner := memory.OpenLocker(ns).Driver()

	drv, _ := countAttempts(inner)
	for _, c := range []struct {
		name      string
		assertion func(driver.Locker) bool
	}{
		{name: "Blocker", assertion: func(d driver.Locker) bool { _, ok := d.(driver.Blocker); return ok }},
		{name: "Watcher", assertion: func(d driver.Locker) bool { _, ok := d.(driver.Watcher); return ok }},
	} {
		if in, out := c.assertion(inner), c.assertion(drv); in != out {
			t.Errorf("%s: the driver has it: %v; the wrapped driver: %v", c.name, in, out)
		}
	}

	drv, cd := countAttempts(strictNames{inner})
	l := dlock.NewLocker(drv)
	defer l.Close()
	if _, err := l.Acquire(ctx, "bad/1", nil); err == nil || !strings.Contains(err.Error(), "strict:") {
		t.Fatalf("Acquire of a name the driver refuses: %v, want the driver's error", err)
	}
	other := memory.OpenLocker(ns)
	defer other.Close()
	held, err := other.Acquire(ctx, "busy", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	if _, err := l.TryAcquire(ctx, "busy", nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held name: %v", err)
	}
	if n := cd.failed.Load(); n != 1 {
		t.Fatalf("failed attempts counted: %d, want 1", n)
	}
}
