package testenv

import (
	"testing"
	"time"
)

func TestWithParams(t *testing.T) {
	for _, c := range []struct {
		in   string
		kv   []string
		want string
	}{
		{"redis://h:1", nil, "redis://h:1"},
		{"redis://h:1", []string{"a", "1"}, "redis://h:1?a=1"},
		{"redis://h:1/?x=y", []string{"a", "1", "b", "2"}, "redis://h:1/?x=y&a=1&b=2"},
	} {
		if got := WithParams(c.in, c.kv...); got != c.want {
			t.Errorf("WithParams(%q, %q) = %q, want %q", c.in, c.kv, got, c.want)
		}
	}
}

func TestContext(t *testing.T) {
	ctx := Context(t, time.Minute)
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > time.Minute {
		t.Fatalf("deadline %v, %v: want within a minute", dl, ok)
	}
	if tdl, ok := t.Deadline(); ok && dl.After(tdl) {
		t.Fatalf("context outlives the test: %v > %v", dl, tdl)
	}
}
