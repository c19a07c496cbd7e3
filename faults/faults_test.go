package faults

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

func TestMain(m *testing.M) {
	ChildMain() // the client processes of a run are this binary
	os.Exit(m.Run())
}

// TestFaults is the short mode: every backend × fault that can run here,
// a few seconds each, asserting zero fenced violations, every lost lease
// signalled (where the backend promises it) and recovery within each
// backend's stated bound. DLOCK_FAULTS_OUT names a directory for the
// report (faults.txt/.json/.html); DLOCK_FAULTS_BACKENDS and
// DLOCK_FAULTS_FAULTS select by comma-separated names.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the fault suite takes minutes")
	}
	out := os.Getenv("DLOCK_FAULTS_OUT")
	if out == "" {
		out = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	opts := Options{
		Backends: splitEnv("DLOCK_FAULTS_BACKENDS"),
		Faults:   splitEnv("DLOCK_FAULTS_FAULTS"),
		Clients:  5,
		TTL:      500 * time.Millisecond,
		Duration: 4 * time.Second,
		Every:    1500 * time.Millisecond,
		Parallel: 2,
		Dir:      out,
		Logf:     t.Logf,
		Command:  "go test -race ./faults/ -run TestFaults",
	}
	rep, err := Suite(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = rep.WriteText(&b)
	t.Logf("report (%v):\n%s", rep.Elapsed, b.String())
	if err := rep.Save(out); err != nil {
		t.Error(err)
	}
	for _, s := range rep.Skipped {
		if os.Getenv(testenv.EnvRequire) == "1" {
			t.Errorf("skipped with %s=1: %s", testenv.EnvRequire, s)
		}
	}
	if len(rep.Results) == 0 {
		t.Skip("no backend could run")
	}
	for _, r := range rep.Results {
		t.Run(r.Name()+"/"+r.Fault, func(t *testing.T) {
			for _, f := range r.Failures {
				t.Error(f)
			}
			if r.Visualization != "" {
				t.Logf("porcupine visualisation: %s", r.Visualization)
			}
		})
	}
}

func splitEnv(name string) []string {
	var out []string
	for _, s := range strings.Split(os.Getenv(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
