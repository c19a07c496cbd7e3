package testenv

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPortTakenRetries: when another server holds the port a starter
// picked, the new server fails to bind, is not mistaken for ready on the
// other's answers, and starts again on a new port.
func TestPortTakenRetries(t *testing.T) {
	start := map[string]func(t *testing.T) (*Server, error){
		KindRedis:     func(*testing.T) (*Server, error) { return StartRedis(testCtx(t), nil) },
		KindZooKeeper: func(*testing.T) (*Server, error) { return StartZooKeeper(testCtx(t), nil) },
		KindEtcd:      func(*testing.T) (*Server, error) { return StartEtcd(testCtx(t), nil) },
	}
	for _, kind := range []string{KindRedis, KindZooKeeper, KindEtcd} {
		t.Run(kind, func(t *testing.T) {
			Require(t, kind)
			var other *Server
			switch kind {
			case KindRedis:
				other = NewRedis(t, nil)
			case KindZooKeeper:
				other = NewZooKeeper(t, nil)
			default:
				other = NewEtcd(t, nil)
			}
			_, port, _ := strings.Cut(other.Addr, ":")
			taken, _ := strconv.Atoi(port)
			calls := 0
			freePorts = func(n int) ([]int, error) {
				calls++
				ps, err := freeLoopbackPorts(n)
				if calls == 1 && err == nil {
					ps[0] = taken
				}
				return ps, err
			}
			defer func() { freePorts = freeLoopbackPorts }()
			t0 := time.Now()
			s, err := start[kind](t)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Addr == other.Addr {
				t.Fatalf("started on the taken %s", other.Addr)
			}
			t.Logf("%s moved from taken port %d to %s in %v", kind, taken, s.Addr, time.Since(t0).Round(time.Millisecond))
		})
	}
}
