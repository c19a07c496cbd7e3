package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/bench"
)

func TestMain(m *testing.M) {
	bench.ChildMain()
	os.Exit(m.Run())
}

// TestQuickSmoke is CI's smoke test of the command: -quick, one workload,
// one backend (mem://, no server needed), no timing assertions.
func TestQuickSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	err := run(ctx, []string{"-quick", "-workload", "uncontended", "-backend", "memory", "-out", dir}, &out, &errb)
	if err != nil {
		t.Fatalf("dlockbench: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	for _, want := range []string{"== uncontended", "memory", "mutual-exclusion violations: 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(errb.String(), "\r") {
		t.Error("a progress bar was drawn although stderr is not a terminal")
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Backend != "memory" || rep.Rows[0].Grants == 0 {
		t.Fatalf("report rows = %+v, want one measured memory row", rep.Rows)
	}
	for _, f := range []string{"report.csv", "index.html"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestFlagsRejectNonsense(t *testing.T) {
	for _, args := range [][]string{
		{"-workload", "nosuch"},
		{"-procs", "0"},
		{"extra-argument"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) accepted it", args)
		}
	}
}

func TestRedactArgsHidesPasswords(t *testing.T) {
	got := strings.Join(redactArgs([]string{"-url", "postgres://u:secret@h/db", "-url=mysql://u:secret@h/db"}), " ")
	if strings.Contains(got, "secret") {
		t.Fatalf("redactArgs kept the password: %s", got)
	}
}
