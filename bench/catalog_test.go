package bench

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/floor"
)

// targetsOf returns the targets TargetsFor lists for a server, by name.
func targetsOf(t *testing.T, s *Server) map[string]Target {
	t.Helper()
	ts, _ := TargetsFor(s)
	byName := map[string]Target{}
	for _, tg := range ts {
		if _, dup := byName[tg.Name]; dup {
			t.Errorf("two targets named %q", tg.Name)
		}
		byName[tg.Name] = tg
	}
	return byName
}

// The rules of the catalog's floors, per server family: each dlock row is
// compared with a fenced floor (one that issues dlock's token), each peer
// with the unfenced floor it is built on, and every floor a row names is
// a target of the same server, with a note saying what it sends.
func TestCatalogFloors(t *testing.T) {
	servers := []*Server{
		{ID: "redis", Backend: "redis", URL: "redis://127.0.0.1:1/0"},
		{ID: "zookeeper", Backend: "zookeeper", URL: "zk://127.0.0.1:1/dlock"},
		{ID: "postgres", Backend: "postgres", URL: "postgres://u:p@127.0.0.1:1/db"},
		{ID: "mysql", Backend: "mysql", URL: "mysql://u:p@127.0.0.1:1/db"},
	}
	for _, s := range servers {
		byName := targetsOf(t, s)
		peers := 0
		for _, tg := range byName {
			if tg.Kind == KindFloor && tg.Note == "" {
				t.Errorf("%s: floor %q has no note", s.ID, tg.Name)
			}
			if tg.Kind != KindDlock && tg.Kind != KindPeer {
				continue
			}
			f, ok := byName[tg.Floor]
			if !ok || f.Kind != KindFloor {
				t.Errorf("%s: %q is compared with %q, not a floor of its server", s.ID, tg.Name, tg.Floor)
				continue
			}
			impl := floorImpls[f.Impl]
			fenced := floor.Fenced(impl.backend, impl.strategy)
			switch {
			case tg.Kind == KindDlock && !fenced:
				t.Errorf("%s: dlock row %q is compared with the unfenced floor %q; dlock issues a token", s.ID, tg.Name, f.Name)
			case tg.Kind == KindPeer && fenced:
				t.Errorf("%s: peer %q is compared with the fenced floor %q; it is built on the unfenced one", s.ID, tg.Name, f.Name)
			}
			if tg.Kind == KindPeer {
				peers++
				if !strings.HasSuffix(f.Name, " unfenced") {
					t.Errorf("%s: the peers' floor is named %q; its name must say it is unfenced", s.ID, f.Name)
				}
			}
		}
		if want := len(peerImpls[s.Backend]); peers != want {
			t.Errorf("%s: %d peers, want %d", s.ID, peers, want)
		}
	}
}

// A Redis server's targets hold both floors: "floor redis" (fenced: the
// dlock row's) and "floor redis unfenced" (the peers'), each saying so.
func TestCatalogRedisHasBothFloors(t *testing.T) {
	byName := targetsOf(t, &Server{ID: "redis", Backend: "redis", URL: "redis://127.0.0.1:1/0"})
	fenced, unfenced := byName["floor redis"], byName["floor redis unfenced"]
	if fenced.Kind != KindFloor || unfenced.Kind != KindFloor {
		t.Fatalf("floors: %+v, %+v", fenced, unfenced)
	}
	if !strings.Contains(fenced.Note, "INCR") {
		t.Errorf("the fenced floor's note %q does not say it takes a token (INCR)", fenced.Note)
	}
	if !strings.Contains(unfenced.Note, "no token") {
		t.Errorf("the unfenced floor's note %q does not say it has no token", unfenced.Note)
	}
	if got := byName["redis"].Floor; got != "floor redis" {
		t.Errorf("redis is compared with %q, want the fenced floor", got)
	}
	for _, p := range []string{"redsync", "redsync tuned", "redislock", "redislock tuned"} {
		if got := byName[p].Floor; got != "floor redis unfenced" {
			t.Errorf("%s is compared with %q, want the unfenced floor", p, got)
		}
	}
	zk := targetsOf(t, &Server{ID: "zookeeper", Backend: "zookeeper", URL: "zk://127.0.0.1:1/dlock"})
	if got := zk["zk.Lock"].Floor; got != "floor zookeeper unfenced" {
		t.Errorf("zk.Lock is compared with %q, want the unfenced floor", got)
	}
	if got := zk["zookeeper/basic"].Floor; zk["zookeeper/basic"].Name != "" && got != "floor zookeeper" {
		t.Errorf("zookeeper/basic is compared with %q, want the fenced floor", got)
	}
}
