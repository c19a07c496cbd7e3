package zookeeper

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/netproxy"
	"github.com/dlock-go/dlock/internal/obstest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// go-zookeeper's lines about a broken connection go to the Observer of a
// Locker opened from a URL, and nothing to stderr.
func TestClientLogToObserver(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	ctx := testenv.Context(t, time.Minute)
	proxy := netproxy.ForTest(t, srv.Addr)
	rec := &obstest.Recorder{}
	logs := obstest.ClientLogsOffStderr(t, rec, "zookeeper", "", func() {
		l, err := dlock.OpenWith(ctx, strings.Replace(srv.URL, srv.Addr, proxy.Addr(), 1), &dlock.Options{Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		proxy.Redirect("127.0.0.1:1") // nothing listens there
		deadline := time.Now().Add(10 * time.Second)
		for len(rec.Events(dlock.EventClientLog)) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Logf("first client line: %s", logs[0].Message)
}
