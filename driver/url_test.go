package driver_test

import (
	"errors"
	"net/url"
	"slices"
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

// Params' errors name the parameter and show a malformed value, except
// a secret parameter's, whatever the value holds and however the key is
// spelled; a value that is well-formed is never an error.
func TestParamsErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		query string
		read  func(p *driver.Params)
		want  []string // in Err's message (nothing: Err is nil)
		never []string // never in it
	}{
		{"malformed int", "n=x%3Fy", func(p *driver.Params) { p.Int("n", 0, 0, 9) }, []string{`n="x?y"`, "integer from 0 to 9"}, nil},
		{"int out of range", "n=10", func(p *driver.Params) { p.Int("n", 0, 0, 9) }, []string{`n="10"`}, nil},
		{"negative duration", "d=-1s", func(p *driver.Params) { p.Duration("d", 0) }, []string{`d="-1s"`, "non-negative"}, nil},
		{"bare milliseconds", "d=1500", func(p *driver.Params) {
			if d := p.Duration("d", 0); d != 1500*time.Millisecond {
				t.Errorf("d=1500 read as %v", d)
			}
		}, nil, nil},
		{"malformed bool", "b=yes", func(p *driver.Params) { p.Bool("b", false) }, []string{`b="yes"`, "true or false"}, nil},
		{"enum", "e=c", func(p *driver.Params) { p.Enum("e", "a", "a", "b") }, []string{`e="c"`, "one of a, b"}, nil},
		{"secret int", "password=p%3Fa%40s%23s", func(p *driver.Params) { p.Int("password", 0, 0, 1) }, []string{"password=xxxxx"}, []string{"p?a@s#s", "p%3Fa"}},
		{"secret duration", "sslpassword=h%C3%BCnter2", func(p *driver.Params) { p.Duration("sslpassword", 0) }, []string{"sslpassword=xxxxx"}, []string{"hünter2", "nter2"}},
		{"secret bool", "Token=s%2F3cr%25t", func(p *driver.Params) { p.Bool("Token", false) }, []string{"Token=xxxxx"}, []string{"s/3cr%t", "3cr"}},
		{"secret enum", "client_secret=%E5%AF%86", func(p *driver.Params) { p.Enum("client_secret", "a", "a") }, []string{"client_secret=xxxxx"}, []string{"密"}},
		{"secret repeated", "passwd=one1&passwd=two2", func(p *driver.Params) { p.String("passwd", "") }, []string{`"passwd" given 2 times`}, []string{"one1", "two2"}},
		{"unknown secret", "password=hunter2&pwd=hunter3", func(p *driver.Params) { p.String("user", "") }, []string{"unknown URL parameter(s) password, pwd (known: user)"}, []string{"hunter"}},
		{"every error at once", "n=x&b=y&z=1", func(p *driver.Params) { p.Int("n", 0, 0, 1); p.Bool("b", false) }, []string{`n="x"`, `b="y"`, "unknown URL parameter(s) z (known: b, n)"}, nil},
		{"file names are not secrets", "passfile=%2Fa%3Fb&sslkey=k.pem", func(p *driver.Params) { p.Int("passfile", 0, 0, 1); p.Int("sslkey", 0, 0, 1) }, []string{`passfile="/a?b"`, `sslkey="k.pem"`}, nil},
	} {
		u, err := driver.ParseURL("x://h/?" + tc.query)
		if err != nil {
			t.Errorf("%s: ParseURL: %v", tc.name, err)
			continue
		}
		tc.read(u.Params)
		err = u.Params.Err()
		if (err == nil) != (len(tc.want) == 0) || (err != nil && !errors.Is(err, driver.ErrInvalidOption)) {
			t.Errorf("%s: Err = %v; want an ErrInvalidOption containing %q", tc.name, err, tc.want)
			continue
		}
		if err == nil {
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Err = %v; want it to contain %s", tc.name, err, w)
			}
		}
		for _, n := range tc.never {
			if strings.Contains(err.Error(), n) {
				t.Errorf("%s: Err = %v shows the secret %q", tc.name, err, n)
			}
		}
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"redis://:pw@h:1/0", "redis://:xxxxx@h:1/0"},
		{"redis://:pa?ss@h:1/0?prefix=x", "redis://:xxxxx@h:1/0?prefix=x"},
		{"redis://:a#b@h:1/0", "redis://:xxxxx@h:1/0"},
		{"postgres://u:p@h/db?sslpassword=k3y&sslkey=/k.pem", "postgres://u:xxxxx@h/db?sslpassword=xxxxx&sslkey=/k.pem"},
		{"postgres://h/db?password=a;b&application_name=me@x", "postgres://h/db?password=xxxxx;b&application_name=me@x"},
		{"mysql://u:p@tcp(h:3306)/db?allowCleartextPasswords=true", "mysql://u:xxxxx@tcp(h:3306)/db?allowCleartextPasswords=true"},
		{"alice:hunter2@127.0.0.1", "alice:xxxxx@127.0.0.1"},
		{"redis://h:1/0#x@y", "redis://h:xxxxx@y"}, // a password with a raw #
		{"redis://u@h/0", "redis://u@h/0"},
		{"mem://", "mem://"},

		// Percent-escapes, raw reserved characters and non-ASCII text in
		// the password: hidden whole, the rest of the URL as written.
		{"redis://:p%3Fw%40d@h:1/0", "redis://:xxxxx@h:1/0"},
		{"postgres://u:p%25%2F@h/db", "postgres://u:xxxxx@h/db"},
		{"redis://:pässwörd@h:1/0", "redis://:xxxxx@h:1/0"},
		{"redis://:%E5%AF%86%E7%A0%81@h:1/0", "redis://:xxxxx@h:1/0"},
		{"redis://:a:b:c@h/0", "redis://:xxxxx@h/0"},
		{"redis://:p%zz@h/0", "redis://:xxxxx@h/0"}, // a malformed escape too
		{"mysql://u:p/w#x@tcp(h:3306)/db", "mysql://u:xxxxx@tcp(h:3306)/db"},
		{"zk://u:p?q#r@h1,h2/locks", "zk://u:xxxxx@h1,h2/locks"},
		{"redlock://u:p@w@a:1,b:2,c:3/0?node_timeout=1s", "redlock://u:xxxxx@a:1,b:2,c:3/0?node_timeout=1s"},

		// Userinfo without a password, an empty one, several hosts,
		// IPv6 and socket addresses, no scheme.
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://u:@h/db", "postgres://u:xxxxx@h/db"},
		{"redis+cluster://:pw@a:1,b:2,c:3", "redis+cluster://:xxxxx@a:1,b:2,c:3"},
		{"postgres://u:p@[::1]:5432/db", "postgres://u:xxxxx@[::1]:5432/db"},
		{"mysql://u:p@unix(/tmp/my.sock)/db", "mysql://u:xxxxx@unix(/tmp/my.sock)/db"},
		{"u:p@tcp(h)/db", "u:xxxxx@tcp(h)/db"},

		// Secrets in the query, in any case and spelling of the key; a
		// fragment is hidden whole.
		{"postgres://h/db?password=a%26b", "postgres://h/db?password=xxxxx"},
		{"postgres://h/db?PASSWORD=x", "postgres://h/db?PASSWORD=xxxxx"},
		{"postgres://h/db?pass%77ord=x", "postgres://h/db?pass%77ord=xxxxx"},
		{"postgres://h/db?password=", "postgres://h/db?password=xxxxx"},
		{"postgres://h/db?password=p#q", "postgres://h/db?password=xxxxx"},
		{"postgres://h/db?sslpassword=a&password=b&token=c&apikey=d&passfile=/f&allowCleartextPasswords=1",
			"postgres://h/db?sslpassword=xxxxx&password=xxxxx&token=xxxxx&apikey=xxxxx&passfile=/f&allowCleartextPasswords=1"},
		{"redis://:p@h:1/0#frag", "redis://:xxxxx@h:1/0#xxxxx"},
	} {
		if got := driver.Redact(tc.raw); got != tc.want {
			t.Errorf("Redact(%q) = %q; want %q", tc.raw, got, tc.want)
		}
	}
}

// Secrets lists a secret as written, decoded and re-encoded, and what
// another reading of an ambiguous URL takes for one; never a user name,
// a host or a file name.
func TestSecrets(t *testing.T) {
	for _, tc := range []struct {
		raw   string
		want  []string
		never []string
	}{
		{"postgres://u:p%3Fq@h/db?sslpassword=a+b&passfile=/x", []string{"p%3Fq", "p?q", "a+b", "a b", "a%2Bb"}, []string{"/x", "u", "h"}},
		{"redis://:p%3Fw%40d@h:1/0", []string{"p%3Fw%40d", "p?w@d", "p%3Fw@d"}, nil},
		{"redis://:pässwörd@h:1/0", []string{"pässwörd", "p%C3%A4ssw%C3%B6rd"}, nil},
		{"redis://:%E5%AF%86%E7%A0%81@h:1/0", []string{"密码", "%E5%AF%86%E7%A0%81"}, nil},
		{"redlock://u:p@w@a:1,b:2,c:3/0", []string{"p@w", "p%40w"}, []string{"u", "a:1,b:2,c:3"}},
		{"mysql://u:p/w#x@tcp(h:3306)/db", []string{"p/w#x", "p%2Fw%23x"}, []string{"tcp(h:3306)"}},
		{"zk://u:p?q#r@h1,h2/locks", []string{"p?q#r", "p%3Fq%23r"}, []string{"h1,h2"}},
		{"postgres://h/db?password=a%26b&token=t%2F1", []string{"a&b", "a%26b", "t/1", "t%2F1"}, []string{"db"}},
		{"postgres://h/db?password=p#q", []string{"p#q", "p", "q"}, nil}, // a raw '#' ends the value, or does not
		{"redis://:p%zz@h/0", []string{"p%zz"}, nil},                     // a malformed escape, as written
		{"postgres://u@h/db", nil, []string{"u", "h", "db"}},
		{"postgres://u:@h/db?password=", nil, []string{""}},
		{"mem://", nil, nil},
	} {
		got := driver.Secrets(tc.raw)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("Secrets(%q) = %q: missing %q", tc.raw, got, w)
			}
		}
		for _, n := range tc.never {
			if slices.Contains(got, n) {
				t.Errorf("Secrets(%q) = %q: %q is not a secret", tc.raw, got, n)
			}
		}
		if len(tc.want) == 0 && len(got) != 0 {
			t.Errorf("Secrets(%q) = %q; want none", tc.raw, got)
		}
		for i := 1; i < len(got); i++ {
			if len(got[i]) > len(got[i-1]) {
				t.Errorf("Secrets(%q) = %q: not longest first, so a secret inside another would be replaced first", tc.raw, got)
			}
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

// A client library prints the password it was given in its own way:
// decoded, re-encoded, inside a URL it rebuilt. Scrub hides every form.
func TestScrubClientForms(t *testing.T) {
	for _, tc := range []struct{ raw, msg, want string }{
		{"redis://:p%3Fw%40d@h:1/0", "AUTH p?w@d: WRONGPASS", "AUTH xxxxx: WRONGPASS"},
		{"redis://:p%3Fw%40d@h:1/0", "dial redis://:p%3Fw%40d@h:1: refused", "dial redis://:xxxxx@h:1: refused"},
		{"redis://:pässwörd@h:1/0", "auth pässwörd; url=redis://:p%C3%A4ssw%C3%B6rd@h:1", "auth xxxxx; url=redis://:xxxxx@h:1"},
		{"redis://:%E5%AF%86%E7%A0%81@h:1/0", "password 密码 rejected", "password xxxxx rejected"},
		{"redlock://u:p@w@a:1,b:2,c:3/0", "node b:2: user=u password=p@w", "node b:2: user=u password=xxxxx"},
		{"redlock://u:p@w@a:1,b:2,c:3/0", "redis://u:p%40w@b:2/0 refused", "redis://u:xxxxx@b:2/0 refused"},
		{"postgres://h/db?password=a%26b", "connect: password=a&b host=h", "connect: password=xxxxx host=h"},
		{"postgres://h/db?sslpassword=k%20y", "sslpassword 'k y' does not decrypt sslkey", "sslpassword 'xxxxx' does not decrypt sslkey"},
		{"mysql://u:p/w#x@tcp(h:3306)/db", "Error 1045: Access denied for user 'u' (using password: YES) u:p/w#x@tcp(h:3306)", "Error 1045: Access denied for user 'u' (using password: YES) u:xxxxx@tcp(h:3306)"},
		{"zk://u:p?q#r@h1,h2/locks", "digest u:p?q#r refused by h2", "digest u:xxxxx refused by h2"},
		{"postgres://u@h/db", "password authentication failed for user u", "password authentication failed for user u"},
	} {
		if got := driver.Scrub(tc.msg, tc.raw); got != tc.want {
			t.Errorf("Scrub(%q, %q) = %q; want %q", tc.msg, tc.raw, got, tc.want)
		}
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
			t.Skip("a password with unprintable bytes is not one a URL can carry")
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

// FuzzScrubClientForms: whatever the password, and however it is written
// in the URL, the secret a driver reads from it (ParseURL's password or
// secret parameter) does not survive Scrub in any form a client library
// prints it: as read, path- or query-escaped, as a userinfo, or inside a
// URL the library rebuilt with net/url. FuzzRedact covers the password
// as written.
func FuzzScrubClientForms(f *testing.F) {
	for _, pw := range []string{"p", "pa?ss", "a#b", "p@ss/w:rd", "%41", "a%2Bb", "x&y=z", "ü?#/@:%;&", "a b", "a+b", "密码", "'q'", "u:p@h"} {
		f.Add(pw, uint8(0), false)
		f.Add(pw, uint8(6), false)
		f.Add(pw, uint8(9), true)
	}
	f.Fuzz(func(t *testing.T, pw string, shape uint8, raw bool) {
		if !secrettest.Printable(pw) {
			t.Skip()
		}
		s := urlShapes[int(shape)%len(urlShapes)]
		if raw && strings.Contains(s, "=P") && strings.ContainsAny(pw, "&;") {
			t.Skip() // a raw '&' or ';' ends a query value
		}
		u, base := encode(s, pw, raw), encode(s, secrettest.Other(pw), raw)
		sec, ok := readSecret(u, s)
		secb, okb := readSecret(base, s)
		if !ok || !okb || sec == "" {
			t.Skip() // a URL ParseURL refuses: FuzzRedact checks its error
		}
		forms := []string{sec, url.PathEscape(sec), url.QueryEscape(sec), strings.TrimPrefix(url.UserPassword("", sec).String(), ":")}
		messages := func(sec string) []string {
			rebuilt := (&url.URL{Scheme: "redis", User: url.UserPassword("u", sec), Host: "127.0.0.1:1", Path: "/0"}).String()
			return []string{
				"auth '" + sec + "' failed",
				"user=u password=" + sec + " host=h",
				"password=" + url.QueryEscape(sec) + "&user=u",
				"dial u:" + url.PathEscape(sec) + "@h",
				"dial " + rebuilt + ": refused",
			}
		}
		msgs, msgsb := messages(sec), messages(secb)
		for i, m := range msgs {
			got, gotb := driver.Scrub(m, u), driver.Scrub(msgsb[i], base)
			for _, form := range forms {
				if secrettest.Leaks(got, gotb, form) {
					t.Errorf("URL %q: Scrub(%q) = %q shows the password as %q (base %q)", u, m, got, form, gotb)
				}
			}
		}
	})
}

// readSecret returns the secret a driver reads from u, a URL of shape s:
// the userinfo's password, or the parameter P stands for.
func readSecret(u, s string) (string, bool) {
	pu, err := driver.ParseURL(u)
	if err != nil {
		return "", false
	}
	i := strings.Index(s, "=P")
	if i < 0 {
		return pu.Password, true
	}
	key := s[strings.LastIndexAny(s[:i], "?&")+1 : i]
	return pu.Query.Get(key), true
}
