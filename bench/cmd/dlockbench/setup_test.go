package main

import (
	"testing"

	"github.com/dlock-go/dlock/bench"
)

// Redlock's and a Cluster's rows are compared with floors on their own
// servers (Redlock's quorum, the Cluster's slots), never with the single
// Redis server's; redsync with the unfenced Redlock floor it is built on.
func TestMultiNodeFloors(t *testing.T) {
	for _, c := range []struct {
		id, url, floor, impl string
	}{
		{"redlock", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0", "floor redlock", "redlock-floor"},
		{"redis+cluster", "redis+cluster://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "floor redis+cluster", "cluster-floor"},
	} {
		st := multiNode(c.id, c.url, nil, func() {})
		byName := map[string]bench.Target{}
		for _, tg := range st.targets {
			byName[tg.Name] = tg
		}
		if got := byName[c.id].Floor; got != c.floor {
			t.Errorf("%s is compared with floor %q, want %q", c.id, got, c.floor)
		}
		f, ok := byName[c.floor]
		if !ok || f.Kind != bench.KindFloor || f.Impl != c.impl || f.URL != c.url || f.Note == "" {
			t.Errorf("%s: floor target %+v; want %s on %s, with a note", c.id, f, c.impl, c.url)
		}
		for _, p := range []string{"redsync (redlock)", "redsync tuned (redlock)"} {
			if c.id != "redlock" {
				continue
			}
			if got := byName[p].Floor; got != "floor redlock unfenced" {
				t.Errorf("%s is compared with floor %q, want the unfenced Redlock floor", p, got)
			}
			if u := byName["floor redlock unfenced"]; u.Impl != "redlock-unfenced-floor" {
				t.Errorf("floor redlock unfenced: %+v", u)
			}
		}
	}
}
