package conformance

import (
	"os"
	"strings"
	"testing"
)

// The package documentation lists every case with its rule, word for word.
func TestDocListsEveryRule(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for line := range strings.SplitSeq(string(src), "\n") {
		b.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "//"), " "))
		b.WriteString(" ")
	}
	doc := strings.Join(strings.Fields(b.String()), " ")
	for _, cs := range cases {
		if want := cs.name + ": " + cs.rule; !strings.Contains(doc, want) {
			t.Errorf("doc.go does not list %q", want)
		}
	}
}
