package zookeeper

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
)

// trickyNames are names that a naive mapping would get wrong.
var trickyNames = []string{
	"a", "orders/42", "/", "//", "a/", "/a", ".", "..", "...", "./a", "a/..", "%", "%2F", "%252F", "%2E", "%2E%2E",
	"zookeeper", "/zookeeper", "zookeeper/quota", "a b", "tab\there", "nul\x00byte", "\x01\x1f\x7f",
	"\u0080\u009f", "é", "中文", "\U0001F600", "\uE000", "\uF8FF", "\uF900", "\uFFEF", "\uFFF0", "\uFFFD", "\uFFFF",
	"_c_0123456789abcdef0123456789abcdef-lock-0000000001", "lock", strings.Repeat("x", 1024),
	// The longest escapes: 1024 bytes that all need escaping (3072 bytes).
	strings.Repeat("\U0001F600", 256), strings.Repeat("\x01", 1024), strings.Repeat("/", 1024),
}

// validZnodeName mirrors ZooKeeper's PathUtils.validatePath for one path
// element.
func validZnodeName(s string) bool {
	if s == "" || s == "." || s == ".." || strings.Contains(s, "/") || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == 0 || forbiddenRune(r) {
			return false
		}
	}
	return true
}

func TestEscapeRoundTripAndInjective(t *testing.T) {
	seen := make(map[string]string)
	for _, name := range trickyNames {
		esc := escapeName(name)
		if !validZnodeName(esc) {
			t.Errorf("escapeName(%q) = %q: not a valid znode name", name, esc)
		}
		back, err := unescapeName(esc)
		if err != nil || back != name {
			t.Errorf("unescapeName(escapeName(%q)) = %q, %v", name, back, err)
		}
		if prev, dup := seen[esc]; dup {
			t.Errorf("%q and %q both escape to %q", prev, name, esc)
		}
		seen[esc] = name
	}
	// Readable names stay readable.
	for _, name := range []string{"orders-42", "é", "中文", "zookeeper", "a.b", "..."} {
		if got := escapeName(name); got != name {
			t.Errorf("escapeName(%q) = %q, want it unchanged", name, got)
		}
	}
	// The worst case stays within 3 bytes per input byte.
	worst := strings.Repeat("\U0001F600", 256) // 1024 bytes
	if n := len(escapeName(worst)); n != 3*1024 {
		t.Errorf("escaped worst case is %d bytes, want %d", n, 3*1024)
	}
}

func FuzzEscape(f *testing.F) {
	for _, n := range trickyNames {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" {
			return
		}
		esc := escapeName(name)
		if !validZnodeName(esc) {
			t.Fatalf("escapeName(%q) = %q: not a valid znode name", name, esc)
		}
		back, err := unescapeName(esc)
		if err != nil || back != name {
			t.Fatalf("round trip of %q gave %q, %v", name, back, err)
		}
	})
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"/dlock", "/a/b/c", "/é", "/a.b", "/zookeeperx"} {
		if err := validatePrefix(p); err != nil {
			t.Errorf("validatePrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"", "dlock", "/", "/a/", "//a", "/a//b", "/.", "/a/..", "/zookeeper", "/zookeeper/x", "/a\x00", "/\U0001F600", "/a\u0085"} {
		if err := validatePrefix(p); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("validatePrefix(%q) = %v, want ErrInvalidOption", p, err)
		}
	}
}

func TestParseChild(t *testing.T) {
	g := strings.Repeat("ab", 16)
	guid, seq, ok := parseChild(childPrefix(g) + "0000000042")
	if !ok || guid != g || seq != 42 {
		t.Fatalf("parseChild = %q %d %v", guid, seq, ok)
	}
	for _, bad := range []string{"lock", "_c_short-lock-1", childPrefix(g), childPrefix(g) + "x", "x" + childPrefix(g) + "1"} {
		if _, _, ok := parseChild(bad); ok {
			t.Errorf("parseChild(%q) ok", bad)
		}
	}
	q := sortQueue([]string{childPrefix(g) + "0000000003", "foreign", childPrefix(g) + "0000000001"})
	if q[0].name != "foreign" || q[1].seq != 1 || q[2].seq != 3 {
		t.Errorf("sortQueue = %+v", q)
	}
}

func TestParseURL(t *testing.T) {
	p, err := parseURL("zk://u%40x:s3cr%2Ft@127.0.0.1:2181,127.0.0.2,[::1]:2182/locks/app?session_timeout=2s&recipe=basic&connect_timeout=500ms")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.hosts, ",") != "127.0.0.1:2181,127.0.0.2:2181,[::1]:2182" || p.user != "u@x" || p.password != "s3cr/t" ||
		p.prefix != "/locks/app" || p.recipe != RecipeBasic || p.sessionTimeout.String() != "2s" || p.connectTimeout.String() != "500ms" {
		t.Errorf("parseURL = %+v", p)
	}
	if p, err := parseURL("zk://h"); err != nil || p.prefix != DefaultPrefix || p.recipe != RecipeFair || p.sessionTimeout != DefaultSessionTimeout {
		t.Errorf("defaults: %+v, %v", p, err)
	}
	for _, raw := range []string{
		"zk://h/?sessiontimeout=1s",   // typo: unknown parameter
		"zk://h/?recipe=herd",         // unknown recipe
		"zk://h/zookeeper",            // reserved
		"zk://h/a//b",                 // empty element
		"zk://h/?session_timeout=1",   // 1ms: too short
		"zk://h/?session_timeout=-1s", // negative
		"zk://,h",                     // empty host
		"zk://h:0",                    // bad port
		"zk://h:x",                    // bad port
		"zk://user@h",                 // no password
		"redis://h",
	} {
		if _, err := parseURL(raw); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("parseURL(%q) = %v, want ErrInvalidOption", raw, err)
		}
	}
	if _, err := parseURL("zk://user:hunter2@h:x/?bogus=1"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v must exist and not show the password", err)
	}
}
