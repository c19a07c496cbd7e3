package netproxy

import "testing"

// ForTest starts a Proxy to upstream that closes when t ends, or ends t.
func ForTest(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
