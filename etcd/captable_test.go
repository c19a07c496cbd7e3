package etcd

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/captable"
	"github.com/dlock-go/dlock/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the etcd rows of the README's capability table")

// TestCapabilityRow checks the etcd row that the library's capability-table
// test (internal/captable) appends to the README's table, against what the
// driver declares on a real server (see captable.ExternalDir). Regenerate
// it with
//
//	go test -run TestCapabilityRow -update ./
//
// then the README with go test ./internal/captable -run TestREADME -update
// in the library.
func TestCapabilityRow(t *testing.T) {
	s := testenv.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := dlock.Open(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := captable.EncodeRows([]captable.Row{{URL: "etcd://h1,h2,h3/prefix", Caps: l.Capabilities()}})
	path := filepath.Join("..", "internal", "captable", captable.ExternalDir, "etcd.json")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s differs from the driver's Capabilities (%v); run\n\tgo test -run TestCapabilityRow -update ./\nin etcd/, then go test ./internal/captable -run TestREADME -update in the library", path, err)
	}
}
