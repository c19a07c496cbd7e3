package etcd

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/dlock-go/dlock/internal/testenv"
)

// queueKV is a key as etcd's JSON gateway shows it.
type queueKV struct {
	Key            []byte `json:"key"`
	CreateRevision string `json:"create_revision"`
	Lease          string `json:"lease"`
}

// rangeKeys returns the keys under prefix on the server at addr, oldest
// (lowest create revision) first, read through the JSON gateway: what the
// server holds, not what a Locker believes.
func rangeKeys(t testing.TB, ctx context.Context, addr, prefix string) []queueKV {
	t.Helper()
	end := []byte(prefix)
	end[len(end)-1]++
	b64 := base64.StdEncoding.EncodeToString
	var r struct{ Kvs []queueKV }
	req := map[string]any{"key": b64([]byte(prefix)), "range_end": b64(end), "sort_target": "CREATE", "sort_order": "ASCEND"}
	if err := testenv.EtcdCall(ctx, addr, "/v3/kv/range", req, &r); err != nil {
		t.Fatal(err)
	}
	return r.Kvs
}
