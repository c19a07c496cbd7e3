package testenv

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Context returns a context that ends after d, or 5s before the test's own
// deadline when that is sooner, and is cancelled when t ends. It is the one
// test context of the project's test packages.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	deadline := time.Now().Add(d)
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := dt.Deadline(); ok && dl.Add(-5*time.Second).Before(deadline) {
			deadline = dl.Add(-5 * time.Second)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// WithParams appends query parameters (key, value, key, value…) to a URL,
// with "?" or "&" as the URL needs. Values are written as given: tests pass
// plain values.
func WithParams(raw string, kv ...string) string {
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	for i := 0; i+1 < len(kv); i += 2 {
		raw += sep + kv[i] + "=" + kv[i+1]
		sep = "&"
	}
	return raw
}
