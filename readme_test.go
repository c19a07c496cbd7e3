package dlock_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// readmeBlock is a fenced block of README.md.
type readmeBlock struct {
	lang, text string
	line       int
}

func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var cur *readmeBlock
	for i, line := range strings.Split(string(src), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(line, "```"), line: i + 1}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: unterminated code block", cur.line)
	}
	return blocks
}

// TestREADMEGoBlocks runs every Go block of README.md as a program (each is
// a complete one), and compares its output with the text block that
// follows it, if any: the README's code cannot drift from the API.
func TestREADMEGoBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Fatal("no go command to build README.md's programs")
		}
	}
	blocks := readmeBlocks(t)
	n := 0
	for i, b := range blocks {
		if b.lang != "go" {
			continue
		}
		n++
		dir := t.TempDir()
		file := filepath.Join(dir, "main.go")
		if err := os.WriteFile(file, []byte(b.text), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), gobin, "run", file)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("README.md:%d: go run: %v\n%s", b.line, err, stderr.String())
			continue
		}
		if i+1 < len(blocks) && blocks[i+1].lang == "text" {
			if got, want := stdout.String(), blocks[i+1].text; got != want {
				t.Errorf("README.md:%d: the program prints\n%s\nthe README (line %d) says\n%s", b.line, got, blocks[i+1].line, want)
			}
		}
	}
	if n == 0 {
		t.Fatal("README.md has no Go block: the quickstart is gone")
	}
}
