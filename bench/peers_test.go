package bench

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

// Every peer has a short row name and a note saying how it is configured;
// a tuned row exists beside each peer whose defaults are not its best.
func TestPeerNotes(t *testing.T) {
	for _, fam := range []string{"redis", "zookeeper"} {
		for _, impl := range peerImpls[fam] {
			p, ok := peers[impl]
			if !ok || p.open == nil {
				t.Errorf("peer %q has no implementation", impl)
				continue
			}
			if len(impl) > 16 {
				t.Errorf("peer name %q is too long for a chart", impl)
			}
			if PeerNotes[impl] == "" {
				t.Errorf("peer %q has no note", impl)
			}
		}
	}
	for _, c := range []struct{ name, says string }{
		{"redsync", "50-250 ms"},
		{"redsync tuned", "WithRetryDelay(1 ms)"},
		{"redislock", "ExponentialBackoff(16 ms, 256 ms)"},
		{"redislock tuned", "LinearBackoff(1 ms)"},
		{"zk.Lock", "no tuned row"},
	} {
		if !strings.Contains(PeerNotes[c.name], c.says) {
			t.Errorf("PeerNotes[%q] = %q; want it to say %q", c.name, PeerNotes[c.name], c.says)
		}
	}
}

// A tuned peer retries every millisecond, a peer as shipped after 16 ms
// and more (redislock: 16, 16, 16, 32, 64 ms...) or 50-250 ms (redsync):
// while a holder keeps a name for 100 ms, each waiter counts its failed
// attempts, on a real Redis.
func TestPeerRetryDelays(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := testenv.Context(t, time.Minute)
	const hold = 100 * time.Millisecond
	for _, c := range []struct {
		impl     string
		min, max uint64 // failed attempts while the name is held
	}{
		{"redsync", 1, 2},
		{"redsync tuned", 10, 1000},
		{"redislock", 3, 7}, // 16, 16, 16, 32, 64 ms
		{"redislock tuned", 10, 1000},
	} {
		t.Run(c.impl, func(t *testing.T) {
			tg := Target{Name: c.impl, Kind: KindPeer, Impl: c.impl, URL: srv.URL, Backend: "redis"}
			holder, err := Open(ctx, tg)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			waiter, err := Open(ctx, tg)
			if err != nil {
				t.Fatal(err)
			}
			defer waiter.Close()
			name := "peer/" + rand.Text()
			h, err := holder.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			released := make(chan error, 1)
			go func() {
				time.Sleep(hold)
				released <- h.Release(context.Background())
			}()
			w, err := waiter.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-released; err != nil {
				t.Fatal(err)
			}
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := waiter.FailedAttempts(); n < c.min || n > c.max {
				t.Errorf("%d failed attempts while a holder kept the name %v; want %d to %d", n, hold, c.min, c.max)
			}
		})
	}
}
