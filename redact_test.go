package dlock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/secrettest"
	_ "github.com/dlock-go/dlock/mysql"
	_ "github.com/dlock-go/dlock/postgres"
	_ "github.com/dlock-go/dlock/redis"
	_ "github.com/dlock-go/dlock/zookeeper"
)

// baseURLs has one URL per registered scheme, on an unreachable loopback
// port, each with one valid parameter.
var baseURLs = []string{
	"mem://?",
	"redis://127.0.0.1:1/0?dial_timeout=1s",
	"rediss://127.0.0.1:1/0?dial_timeout=1s",
	"redis+cluster://127.0.0.1:1,127.0.0.1:2?dial_timeout=1s",
	"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0?node_timeout=10ms",
	"zk://127.0.0.1:1/locks?connect_timeout=100ms",
	"postgres://u@127.0.0.1:1/db?connect_timeout=1",
	"postgresql://u@127.0.0.1:1/db?connect_timeout=1",
	"mysql://u@127.0.0.1:1/db?timeout=1s",
}

// A malformed query is ErrInvalidOption naming the bad pair on every
// scheme; before, redis, postgres and mem dropped the pair silently.
func TestMalformedQueryEveryScheme(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schemes := map[string]bool{}
	for _, base := range baseURLs {
		schemes[strings.SplitN(base, ":", 2)[0]] = true
		sep := "&"
		if strings.HasSuffix(base, "?") {
			sep = ""
		}
		for _, pair := range []string{"prefix=app:;x", "table=t;x", "bogus=1;x", "a=%zz"} {
			u := base + sep + pair
			l, err := dlock.Open(ctx, u)
			if err == nil {
				l.Close()
			}
			if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), pair) {
				t.Errorf("Open(%q) = %v; want ErrInvalidOption naming %q", u, err, pair)
			}
		}
	}
	for _, s := range dlock.Schemes() {
		if !schemes[s] && s != "leaky" {
			t.Errorf("scheme %s is not tested", s)
		}
	}
}

// FuzzOpenRedaction: for every scheme and any printable password, raw or
// percent-encoded, in the userinfo or a secret parameter, no error of
// dlock.Open (against an unreachable loopback port) shows it more often
// than the error made with a password sharing no character with it.
func FuzzOpenRedaction(f *testing.F) {
	for _, pw := range []string{"p", "1", "pa?ss", "a#b", "p@ss/w:rd", "50%off", "ü?#/@:%;&", "a b", "dlock", "x?k=v@y"} {
		for shape := range len(baseURLs) {
			f.Add(pw, uint8(shape), true)
			f.Add(pw, uint8(shape), false)
		}
	}
	f.Fuzz(func(t *testing.T, pw string, shape uint8, raw bool) {
		if !secrettest.Printable(pw) {
			t.Skip()
		}
		base := baseURLs[int(shape)%len(baseURLs)]
		put := func(pw string) string {
			enc := urlUserPassword(pw)
			if raw {
				enc = pw
			}
			i := strings.Index(base, "://") + 3
			rest := base[i:]
			if j := strings.IndexByte(rest, '@'); j >= 0 {
				rest = rest[j+1:]
			}
			return base[:i] + "u:" + enc + "@" + rest
		}
		if strings.HasPrefix(base, "mem") {
			put = func(pw string) string {
				if raw {
					return base + "password=" + pw
				}
				return base + "password=" + urlQueryEscape(pw)
			}
			if raw && strings.ContainsAny(pw, "&;") {
				t.Skip()
			}
		}
		u, ub := put(pw), put(secrettest.Other(pw))
		open := func(u string) error { // each with its own budget: one shared would let the first starve the second
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := dlock.Open(ctx, u)
			return err
		}
		err, errb := open(u), open(ub)
		if err == nil {
			return
		}
		msgb := ""
		if errb != nil {
			msgb = errb.Error()
		}
		if secrettest.Leaks(err.Error(), msgb, pw) && (errb != nil || len(pw) > 2) {
			t.Errorf("Open(%q): %v\nshows the password %q (base: %v)", u, err, pw, errb)
		}
	})
}

func urlUserPassword(pw string) string {
	return strings.TrimPrefix(url.UserPassword("", pw).String(), ":")
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
