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
	for _, kind := range []string{KindRedis, KindZooKeeper} {
		t.Run(kind, func(t *testing.T) {
			Require(t, kind)
			var other *Server
			if kind == KindRedis {
				other = NewRedis(t, nil)
			} else {
				other = NewZooKeeper(t, nil)
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
			ctx := testCtx(t)
			var s *Server
			var err error
			t0 := time.Now()
			if kind == KindRedis {
				s, err = StartRedis(ctx, nil)
			} else {
				s, err = StartZooKeeper(ctx, nil)
			}
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
