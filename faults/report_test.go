package faults

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReportFormats(t *testing.T) {
	dir := t.TempDir()
	rep := NewReport("dlockchaos -backend redis")
	rep.Results = []*Result{
		{Backend: "redis", Fault: "kill", Ops: 10, Injections: 1, FencedViolations: 0, Fencing: true,
			Recoveries: []time.Duration{400 * time.Millisecond}, RecoveryP50: 400 * time.Millisecond,
			RecoveryMax: 400 * time.Millisecond, RecoveryBound: 500 * time.Millisecond, RecoverySlack: time.Second},
		{Backend: "redis", Fault: "failover", Ops: 12, Injections: 1, FencedViolations: 1, Unsafe: true, Fencing: true,
			Overlaps: 2, LongestOverlap: 150 * time.Millisecond, Lost: 2, Signalled: 1,
			Visualization: filepath.Join(dir, "fenced-redis-failover-1.html")},
		{Backend: "mysql/forupdate", Fault: "restart", Ops: 9, Injections: 1, FencedViolations: 1, Fencing: true,
			Failures: []string{"1 fenced violations"}},
	}
	rep.Skipped = []string{"zookeeper: not installed"}
	if err := rep.Save(dir); err != nil {
		t.Fatal(err)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, "faults.txt"))
	for _, want := range []string{"400ms / 400ms (bound 500ms + 1000ms slack)", "2 (longest 150ms)", "no 1/2", "ok (unsafe by design)", "FAIL: 1 fenced violations", "skipped: zookeeper"} {
		if !bytes.Contains(txt, []byte(want)) {
			t.Errorf("faults.txt lacks %q:\n%s", want, txt)
		}
	}
	var back Report
	js, _ := os.ReadFile(filepath.Join(dir, "faults.json"))
	if err := json.Unmarshal(js, &back); err != nil || len(back.Results) != 3 {
		t.Errorf("faults.json: %v, %d results", err, len(back.Results))
	}
	html, _ := os.ReadFile(filepath.Join(dir, "faults.html"))
	for _, want := range []string{`href="fenced-redis-failover-1.html"`, `class="fail"`, `class="unsafe"`, "mysql/forupdate"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("faults.html lacks %q", want)
		}
	}
	if !rep.Failed() {
		t.Error("Failed() = false with a failing run")
	}
}
