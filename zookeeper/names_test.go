package zookeeper

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/layout"
)

// trickyNames are names that a naive mapping would get wrong (the escape
// itself is tested in internal/layout).
var trickyNames = layout.TrickyNames

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
	p, err := parseURL("zk://u%40x:s3cr%2Ft@127.0.0.1:2181,127.0.0.2,[::1]:2182/locks/app?session_timeout=2s&recipe=basic&connect_timeout=500ms&sessions=2")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.hosts, ",") != "127.0.0.1:2181,127.0.0.2:2181,[::1]:2182" || p.user != "u@x" || p.password != "s3cr/t" ||
		p.prefix != "/locks/app" || p.recipe != RecipeBasic || p.sessionTimeout.String() != "2s" || p.connectTimeout.String() != "500ms" || p.sessions != 2 {
		t.Errorf("parseURL = %+v", p)
	}
	if p, err := parseURL("zk://h"); err != nil || p.prefix != DefaultPrefix || p.recipe != RecipeFair || p.sessionTimeout != DefaultSessionTimeout || p.sessions != defaultSessions {
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
		"zk://h/?sessions=0",          // at least one
		"zk://h/?sessions=17",         // at most maxSessions
		"zk://h/?sessions=x",
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
