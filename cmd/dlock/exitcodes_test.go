package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the exit-status tables of the package doc and the READMEs from exitStatuses")

// exitDoc is a document that shows exitStatuses: the text between begin
// and end is render's output.
type exitDoc struct {
	path, begin, end string
	render           func() string
}

const (
	mdBegin = "<!-- exit statuses: generated from exitStatuses in cmd/dlock/main.go by `cd cmd/dlock && go test -run TestExitStatusDocs -update`; the test fails when they differ -->\n"
	mdEnd   = "<!-- end exit statuses -->"
)

var exitDocs = []exitDoc{
	{"main.go", "// Of \"dlock run\":\n//\n", "//\n// Whenever", exitStatusDoc},
	{"README.md", mdBegin, mdEnd, exitStatusMarkdown},
	{"../../README.md", mdBegin, mdEnd, exitStatusMarkdown},
}

// exitStatusDoc renders exitStatuses as a code block of a doc comment.
func exitStatusDoc() string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(exitStatusText("", 70), "\n") {
		if line != "" {
			b.WriteString("//\t" + line)
		}
	}
	return b.String()
}

// exitStatusMarkdown renders exitStatuses as a Markdown table.
func exitStatusMarkdown() string {
	var b strings.Builder
	b.WriteString("\n| status | name | meaning |\n|---|---|---|\n")
	for _, e := range exitStatuses {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", e.status, e.name, e.meaning)
	}
	b.WriteString("\n")
	return b.String()
}

// TestExitStatusDocs: the package doc, README.md and cmd/dlock/README.md
// show exitStatuses, the table the help text is made from, so that the
// statuses documented are the statuses dlock exits with.
func TestExitStatusDocs(t *testing.T) {
	for _, d := range exitDocs {
		raw, err := os.ReadFile(d.path)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(raw)
		i := strings.Index(doc, d.begin)
		j := strings.Index(doc[i+len(d.begin):], d.end)
		if i < 0 || j < 0 {
			t.Errorf("%s: markers %q and %q not found in order", d.path, d.begin, d.end)
			continue
		}
		j += i + len(d.begin)
		got, want := doc[i+len(d.begin):j], d.render()
		if got == want {
			continue
		}
		if *update {
			if err := os.WriteFile(d.path, []byte(doc[:i+len(d.begin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s's exit-status table differs from exitStatuses in main.go; run\n\tcd cmd/dlock && go test -run TestExitStatusDocs -update\ngot:\n%s\nwant:\n%s", d.path, got, want)
	}
}

// TestExitStatusTable: every status dlock itself exits with is a row of
// exitStatuses, once, and the help text shows every row.
func TestExitStatusTable(t *testing.T) {
	rows := map[string]bool{}
	for _, e := range exitStatuses {
		if rows[e.status] || rows[e.name] || e.name == "" || e.meaning == "" {
			t.Errorf("row %+v: status or name repeated, or empty", e)
		}
		rows[e.status], rows[e.name] = true, true
	}
	for _, code := range []int{exitUsage, exitUnavailable, exitBusy, exitLost, exitCannotExec, exitNotFound} {
		if !rows[strconv.Itoa(code)] {
			t.Errorf("exit status %d is not in exitStatuses", code)
		}
	}
	if !rows[strconv.Itoa(exitSignalBase)+"+N"] {
		t.Errorf("exit statuses %d+N are not in exitStatuses", exitSignalBase)
	}
	var help strings.Builder
	cli{}.help(&help)
	if !strings.Contains(help.String(), "Exit status of run:\n"+exitStatusText("  ", 78)) {
		t.Errorf("help text lacks the exit-status table:\n%s", help.String())
	}
}
