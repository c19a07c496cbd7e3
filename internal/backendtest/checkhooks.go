package backendtest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// CheckHooks checks b's hooks on its shared servers, for each strategy: a
// held lock shows no residue, Revoke drops it behind its holder's back (the
// holder learns of the loss), and a name nobody holds cannot be revoked.
// It is the check that the hooks and the driver agree on the layout; b's
// driver must be linked into the test binary.
func CheckHooks(t *testing.T, b *Backend) {
	t.Helper()
	env := b.Shared(t, &Options{SessionTimeout: 2 * time.Second})
	for _, s := range append([]string{""}, b.Strategies...) {
		t.Run("strategy="+s, func(t *testing.T) {
			ctx := testenv.Context(t, time.Minute)
			url := env.Namespace(env.URL(s), "hooks-"+strings.ReplaceAll(t.Name(), "/", "_"))
			hooks := env.Hooks(url)
			defer hooks.Close()
			if hooks.Restart != nil {
				t.Error("the hooks of shared servers can restart them")
			}
			l, err := dlock.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			name := "hooks/" + t.Name()
			if err := hooks.Revoke(ctx, name); err == nil && s != "version" {
				t.Error("Revoke of a name nobody holds: no error")
			}
			lease, err := l.Acquire(ctx, name, &dlock.AcquireOptions{TTL: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if n, err := hooks.Residue(ctx, name); err != nil || n != 0 {
				t.Errorf("Residue while held = %d, %v; want 0", n, err)
			}
			if err := hooks.Revoke(ctx, name); err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			select {
			case <-lease.Done():
				if !errors.Is(lease.Err(), dlock.ErrLockLost) {
					t.Errorf("after Revoke: lease.Err() = %v, want ErrLockLost", lease.Err())
				}
			case <-ctx.Done():
				t.Fatal("the holder never learnt of the revoke")
			}
			if n, err := hooks.Residue(ctx, name); err != nil || n != 0 {
				t.Errorf("Residue after Revoke = %d, %v; want 0", n, err)
			}
		})
	}
}
