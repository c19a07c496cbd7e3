package driver_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/secrettest"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw            string
		user, pw, host string
		hosts          int
		path, query    string
		hasUser, hasPW bool
	}{
		{"redis://127.0.0.1:6379/0", "", "", "127.0.0.1:6379", 1, "/0", "", false, false},
		{"REDIS://u:p@h:1/0?prefix=a:", "u", "p", "h:1", 1, "/0", "prefix=a:", true, true},
		{"redlock://:pw@a:1,b:2,c:3/0", "", "pw", "a:1,b:2,c:3", 3, "/0", "", true, true},
		{"postgres://u:p%40ss%3F%23%2F@h/db", "u", "p@ss?#/", "h", 1, "/db", "", true, true},
		{"postgres://u:a/b+c@h:5432/db", "u", "a/b+c", "h:5432", 1, "/db", "", true, true},     // raw '/' and '+' (base64)
		{"redis://:pa@ss@h:1/0", "", "pa@ss", "h:1", 1, "/0", "", true, true},                  // raw '@'
		{"redis://:pa?ss@h:1/0?prefix=x", "", "pa?ss", "h:1", 1, "/0", "prefix=x", true, true}, // raw '?'
		{"redis://u:1?k@h:1/0", "u", "1?k", "h:1", 1, "/0", "", true, true},                    // '@' in a query key
		{"redis://:a#b@h:1/0", "", "a#b", "h:1", 1, "/0", "", true, true},                      // raw '#'
		{"zk://u:p:q@h1,h2:2182/locks%2Fx", "u", "p:q", "h1,h2:2182", 2, "/locks/x", "", true, true},
		{"mysql://u:p)@tcp(127.0.0.1:3306)/db?x=1", "u", "p)", "tcp(127.0.0.1:3306)", 1, "/db", "x=1", true, true},
		{"mysql://u@unix(/tmp/my.sock)/db", "u", "", "unix(/tmp/my.sock)", 1, "/db", "", true, false},
		{"postgres://h/db?application_name=me@corp", "", "", "h", 1, "/db", "application_name=me@corp", false, false},
		{"mem://", "", "", "", 0, "", "", false, false},
		{"mem://name", "", "", "name", 1, "", "", false, false},
	} {
		u, err := driver.ParseURL(tc.raw)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.raw, err)
			continue
		}
		if u.User != tc.user || u.Password != tc.pw || u.Host != tc.host || len(u.Hosts) != tc.hosts ||
			u.Path != tc.path || u.HasUserinfo != tc.hasUser || u.HasPassword != tc.hasPW ||
			u.Query.Encode() != mustQuery(t, tc.query).Encode() {
			t.Errorf("ParseURL(%q) = %+v", tc.raw, u)
		}
	}
}

func mustQuery(t *testing.T, q string) url.Values {
	v, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A malformed query is an error naming the bad pair (never dropped, as
// url.URL.Query drops it), and the error never shows a secret value.
func TestParseURLMalformed(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"redis://h/0?prefix=app:;x", `"prefix=app:;x"`},
		{"postgres://h/db?table=t;x", `"table=t;x"`},
		{"mem://?bogus=1;x", `"bogus=1;x"`},
		{"zk://h?a=%zz", `"a=%zz"`},
		{"mysql://h/db?password=se;cret", `"password=xxxxx"`},
		{"redis://h/0#frag", "fragment"},
		{"redis://:50%off@h/0", "percent-encoding"},
		{"h:1/0", "scheme"},
	} {
		_, err := driver.ParseURL(tc.raw)
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q) = %v; want ErrInvalidOption naming %s", tc.raw, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "cret") || strings.Contains(err.Error(), "50%off")) {
			t.Errorf("ParseURL(%q) error shows a secret: %v", tc.raw, err)
		}
	}
}

func TestParams(t *testing.T) {
	u, err := driver.ParseURL("x://h/?d=2s&ms=250&i=7&b=true&e=b&s=v&sslpassword=hunter2&unk=1")
	if err != nil {
		t.Fatal(err)
	}
	p := u.Params
	if p.Duration("d", 0) != 2*time.Second || p.Duration("ms", 0) != 250*time.Millisecond || p.Int("i", 0, 0, 9) != 7 ||
		!p.Bool("b", false) || p.Enum("e", "a", "a", "b") != "b" || p.String("s", "") != "v" || p.String("none", "def") != "def" {
		t.Error("wrong values")
	}
	if rest := p.Rest(); len(rest) != 2 || rest.Get("unk") != "1" {
		t.Errorf("Rest = %v", rest)
	}
	p.Int("sslpassword", 0, 0, 1) // a malformed secret value is not shown
	err = p.Err()
	if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), "unk") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Err = %v", err)
	}
	u, _ = driver.ParseURL("x://h/?a=1&a=2")
	u.Params.String("a", "")
	if err := u.Params.Err(); err == nil || !strings.Contains(err.Error(), "2 times") {
		t.Errorf("repeated parameter: %v", err)
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://:pw@h:1/0":                                       "redis://:xxxxx@h:1/0",
		"redis://:pa?ss@h:1/0?prefix=x":                           "redis://:xxxxx@h:1/0?prefix=x",
		"redis://:a#b@h:1/0":                                      "redis://:xxxxx@h:1/0",
		"postgres://u:p@h/db?sslpassword=k3y&sslkey=/k.pem":       "postgres://u:xxxxx@h/db?sslpassword=xxxxx&sslkey=/k.pem",
		"postgres://h/db?password=a;b&application_name=me@x":      "postgres://h/db?password=xxxxx;b&application_name=me@x",
		"mysql://u:p@tcp(h:3306)/db?allowCleartextPasswords=true": "mysql://u:xxxxx@tcp(h:3306)/db?allowCleartextPasswords=true",
		"alice:hunter2@127.0.0.1":                                 "alice:xxxxx@127.0.0.1",
		"redis://h:1/0#x@y":                                       "redis://h:xxxxx@y", // a password with a raw #
		"redis://u@h/0":                                           "redis://u@h/0",
		"mem://":                                                  "mem://",
	} {
		if got := driver.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q; want %q", raw, got, want)
		}
	}
}

func TestSecrets(t *testing.T) {
	got := driver.Secrets("postgres://u:p%3Fq@h/db?sslpassword=a+b&passfile=/x")
	for _, want := range []string{"p%3Fq", "p?q", "a+b", "a b", "a%2Bb"} {
		found := false
		for _, s := range got {
			found = found || s == want
		}
		if !found {
			t.Errorf("Secrets = %q: missing %q", got, want)
		}
	}
	for _, s := range got {
		if s == "/x" {
			t.Errorf("passfile is a file name, not a secret: %q", got)
		}
	}
}

func TestScrub(t *testing.T) {
	raw := "postgres://u:p@127.0.0.1:1/db"
	for msg, want := range map[string]string{
		"connect " + raw + ": refused":                   "connect postgres://u:xxxxx@127.0.0.1:1/db: refused",
		"postgres: password authentication failed for u": "postgres: password authentication failed for u",
		"auth 'p' failed; user=u password=p":             "auth 'xxxxx' failed; user=u password=xxxxx",
		"dial u:p@127.0.0.1:1":                           "dial u:xxxxx@127.0.0.1:1",
	} {
		if got := driver.Scrub(msg, raw); got != want {
			t.Errorf("Scrub(%q) = %q; want %q", msg, got, want)
		}
	}
	// The redacted URL itself is left alone even when a short password
	// equals a piece of it.
	raw = "redis://:1@127.0.0.1:1/0"
	if got := driver.Scrub("open "+driver.Redact(raw)+": x", raw); got != "open redis://:xxxxx@127.0.0.1:1/0: x" {
		t.Errorf("Scrub garbled the redacted URL: %q", got)
	}
}

// urlShapes are the URL forms of every scheme, with P where the password
// goes.
var urlShapes = []string{
	"redis://:P@127.0.0.1:1/0?dial_timeout=1s",
	"rediss://user:P@127.0.0.1:1/0",
	"redis+cluster://u:P@127.0.0.1:1,127.0.0.1:2?max_retries=0",
	"redlock://:P@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0?node_timeout=10ms",
	"zk://dlock:P@127.0.0.1:1/locks?connect_timeout=100ms",
	"postgres://dlock:P@127.0.0.1:1/dlock?sslmode=disable&connect_timeout=1",
	"postgresql://dlock@127.0.0.1:1/dlock?sslpassword=P&strategy=advisory",
	"postgres://127.0.0.1:1/dlock?user=dlock&password=P",
	"mysql://dlock:P@127.0.0.1:1/dlock?timeout=1s",
	"mysql://dlock:P@tcp(127.0.0.1:1)/dlock?strategy=getlock",
	"mem://?password=P",
}

// Encodings of a password in a URL: raw, and percent-encoded as a
// userinfo (url.UserPassword) or a query value.
func encode(shape, pw string, raw bool) string {
	if raw {
		return strings.Replace(shape, "P", pw, 1)
	}
	if i := strings.Index(shape, "P"); shape[i-1] == '=' {
		return strings.Replace(shape, "P", url.QueryEscape(pw), 1)
	}
	return strings.Replace(shape, "P", strings.TrimPrefix(url.UserPassword("", pw).String(), ":"), 1)
}

func FuzzRedact(f *testing.F) {
	for _, pw := range []string{"p", "1", "pa?ss", "a#b", "p@ss/w:rd", "50%off", "%41", "x&y=z", "ü?#/@:%;&", "a b", "dlock", "127", "p?k=v@x"} {
		f.Add(pw, uint8(0), true)
		f.Add(pw, uint8(5), false)
	}
	f.Fuzz(func(t *testing.T, pw string, shape uint8, raw bool) {
		if !secrettest.Printable(pw) {
			t.Skip()
		}
		s := urlShapes[int(shape)%len(urlShapes)]
		if raw && strings.Contains(s, "=P") && strings.ContainsAny(pw, "&;") {
			t.Skip() // a raw '&' or ';' ends a query value: the rest is another parameter
		}
		u, base := encode(s, pw, raw), encode(s, secrettest.Other(pw), raw)
		if r, rb := driver.Redact(u), driver.Redact(base); secrettest.Leaks(r, rb, pw) {
			t.Errorf("Redact(%q) = %q shows the password %q (base %q)", u, r, pw, rb)
		}
		for _, msg := range []string{"connect %s: refused", "user=u password=%s", "auth '%s' failed", "dial u:%s@h"} {
			m := strings.Replace(msg, "%s", pw, 1)
			if strings.HasPrefix(msg, "connect") {
				m = strings.Replace(msg, "%s", u, 1)
			}
			mb := strings.Replace(msg, "%s", secrettest.Other(pw), 1)
			if strings.HasPrefix(msg, "connect") {
				mb = strings.Replace(msg, "%s", base, 1)
			}
			if got, gotb := driver.Scrub(m, u), driver.Scrub(mb, base); secrettest.Leaks(got, gotb, pw) {
				t.Errorf("Scrub(%q, %q) = %q shows the password", m, u, got)
			}
		}
		pu, err := driver.ParseURL(u)
		if err != nil {
			// A password of one or two characters may be part of the
			// error's fixed text ("%" in "write '%' as %25").
			if len(pw) > 2 && secrettest.Leaks(err.Error(), "", pw) {
				if _, errb := driver.ParseURL(base); errb == nil || secrettest.Leaks(err.Error(), errb.Error(), pw) {
					t.Errorf("ParseURL(%q) error shows the password: %v", u, err)
				}
			}
			if !raw {
				t.Errorf("ParseURL(%q) of an encoded password: %v", u, err)
			}
			return
		}
		if !raw {
			got := pu.Password
			if strings.Contains(s, "=P") {
				got = pu.Query.Get(strings.TrimPrefix(s[strings.LastIndexAny(s[:strings.Index(s, "=P")], "?&")+1:strings.Index(s, "=P")], ""))
			}
			if got != pw {
				t.Errorf("ParseURL(%q): password %q, want %q", u, got, pw)
			}
		}
	})
}
