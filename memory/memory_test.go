package memory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/memory"
)

// harness runs the conformance suite on one memory namespace. mem:// is
// private to a process, so it has no URL and the cross-process cases are
// skipped.
type harness struct{ ns *memory.Namespace }

var (
	_ conformance.Revoker = harness{}
	_ conformance.Residue = harness{}
)

func (h harness) NewLocker(context.Context) (*dlock.Locker, error) {
	return memory.OpenLocker(h.ns), nil
}
func (harness) URL() string  { return "" }
func (harness) Close() error { return nil }

func (h harness) Revoke(_ context.Context, name string) error {
	if !h.ns.Revoke(name) {
		return fmt.Errorf("memory harness: revoke %q: %w", name, dlock.ErrNotHeld)
	}
	return nil
}

func (h harness) Residue(_ context.Context, name string) (int, error) {
	return h.ns.Waiters(name), nil
}

func TestConformance(t *testing.T) {
	conformance.Run(t, func(context.Context) (conformance.Harness, error) {
		return harness{memory.NewNamespace()}, nil
	})
}
