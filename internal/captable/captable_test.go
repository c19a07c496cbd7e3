package captable_test

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/captable"
	"github.com/dlock-go/dlock/internal/testenv"
	_ "github.com/dlock-go/dlock/memory"
	_ "github.com/dlock-go/dlock/redis"
	_ "github.com/dlock-go/dlock/zookeeper"
)

var update = flag.Bool("update", false, "rewrite the table in README.md")

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// TestREADME opens every backend and strategy on real servers and checks
// that README.md's capability table is what their Capabilities declare.
func TestREADME(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	redis := testenv.Redis(t)
	cluster := testenv.RedisCluster(t)
	nodes := testenv.RedisNodes(t, 3)
	zk := testenv.ZooKeeper(t)
	var redlock []string
	for _, n := range nodes {
		redlock = append(redlock, n.Addr)
	}
	entries := []struct{ shown, url string }{
		{"mem://", "mem://"},
		{"redis://host:6379/0", redis.URL},
		{"redis+cluster://h1,h2,h3", cluster.URL},
		{"redlock://h1,h2,h3", "redlock://" + strings.Join(redlock, ",")},
		{"zk://h1,h2,h3/prefix", zk.URL},
		{"zk://…?recipe=basic", zk.URL + "?recipe=basic"},
	}
	entries = append(entries, sqlEntries(t)...)

	var rows []captable.Row
	for _, e := range entries {
		l, err := dlock.Open(ctx, e.url)
		if err != nil {
			t.Fatalf("open %s: %v", e.shown, err)
		}
		rows = append(rows, captable.Row{URL: e.shown, Caps: l.Capabilities()})
		l.Close()
	}
	ext, err := captable.ExternalRows(captable.ExternalDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ext) == 0 {
		t.Fatalf("no rows in %s: the etcd module's TestCapabilityRow writes them", captable.ExternalDir)
	}
	rows = append(rows, ext...)
	table := captable.Render(rows)

	const path = "../../README.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := captable.Splice(string(doc), table)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != string(doc) {
		t.Errorf("README.md's capability table differs from the drivers' Capabilities; run\n\tgo test ./internal/captable -run TestREADME -update\nwant:\n%s", table)
	}
}

// The semaphore column says what Capabilities declare, and "—" without
// semaphores.
func TestSemaphoreColumn(t *testing.T) {
	row := func(c driver.Capabilities) string {
		table := captable.Render([]captable.Row{{URL: "x://", Caps: c}})
		line := strings.Split(table, "\n")[2]
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		return cells[len(cells)-1]
	}
	for _, tc := range []struct {
		caps driver.Capabilities
		want string
	}{
		{driver.Capabilities{}, "—"},
		{driver.Capabilities{MaxPermits: 1 << 20, SemaphoreWait: driver.WaitQueue, SemaphoreFair: true}, "up to 1 048 576, queue, fair"},
		{driver.Capabilities{MaxPermits: 100, SemaphoreWait: driver.WaitNotify}, "up to 100, notify"},
		{driver.Capabilities{MaxPermits: 1000, SemaphoreWait: driver.WaitPoll}, "up to 1 000, poll"},
	} {
		if got := row(tc.caps); got != tc.want {
			t.Errorf("MaxPermits %d, %q, fair %v: %q, want %q", tc.caps.MaxPermits, tc.caps.SemaphoreWait, tc.caps.SemaphoreFair, got, tc.want)
		}
	}
}
