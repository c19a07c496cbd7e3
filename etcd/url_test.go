package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/secrettest"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url   string
		check func(t *testing.T, c *config)
	}{
		{"etcd://127.0.0.1:2379", func(t *testing.T, c *config) {
			if len(c.endpoints) != 1 || c.endpoints[0] != "http://127.0.0.1:2379" || c.prefix != DefaultPrefix || c.tls != nil || c.dialTimeout != DefaultDialTimeout {
				t.Errorf("%+v", c)
			}
		}},
		{"etcd://a,b:2380,[::1]:1/app/locks/?dial_timeout=2s", func(t *testing.T, c *config) {
			want := []string{"http://a:2379", "http://b:2380", "http://[::1]:1"}
			if strings.Join(c.endpoints, " ") != strings.Join(want, " ") || c.prefix != "/app/locks" || c.dialTimeout != 2*time.Second {
				t.Errorf("%+v", c)
			}
		}},
		{"etcds://u:p%40ss@example.com,b/x?skip_verify=true", func(t *testing.T, c *config) {
			if c.endpoints[0] != "https://example.com:2379" || c.tls == nil || c.tls.ServerName != "example.com" || !c.tls.InsecureSkipVerify ||
				c.user != "u" || c.password != "p@ss" || c.prefix != "/x" {
				t.Errorf("%+v", c)
			}
		}},
		{"etcd://u:pa?ss@h/x", func(t *testing.T, c *config) {
			if c.user != "u" || c.password != "pa?ss" || c.endpoints[0] != "http://h:2379" {
				t.Errorf("%+v", c)
			}
		}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c, err := parseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// TestBadURLs: malformed URLs and unknown or misplaced parameters are
// ErrInvalidOption, and no error shows the password, however it is
// written (raw '?', '@' and '%' included).
func TestBadURLs(t *testing.T) {
	for _, pw := range []string{"s3cr%65t-pw", "pa?ss-word", "p@ss-w0rd", "50%25off-pw"} {
		for _, u := range []string{
			"etcd://u:" + pw + "@127.0.0.1:1/x?bogus=1",
			"etcd://u:" + pw + "@127.0.0.1:1/x?skip_verify=true",
			"etcd://u:" + pw + "@127.0.0.1:1,,127.0.0.1:2/x",
			"etcd://u:" + pw + "@127.0.0.1:99999/x",
			"etcd://u:" + pw + "@:1/x",
			"etcd://u:" + pw + "@127.0.0.1:1/x?dial_timeout=soon",
			"etcd://u:" + pw + "@127.0.0.1:1/x?dial_timeout=0",
			"etcds://u:" + pw + "@127.0.0.1:1/x?skip_verify=maybe",
			"etcd://u:" + pw + "@127.0.0.1:1/x?dial_timeout=1s&dial_timeout=2s",
			"etcd://u:" + pw + "@[::1/x",
			"etcd://:" + pw + "@127.0.0.1:1/x",
		} {
			t.Run(u, func(t *testing.T) {
				_, err := dlock.Open(context.Background(), u)
				if !errors.Is(err, dlock.ErrInvalidOption) {
					t.Fatalf("Open: %v, want ErrInvalidOption", err)
				}
				for _, s := range driver.Secrets(u) {
					if len(s) > 2 && secrettest.Leaks(err.Error(), "", s) {
						t.Errorf("the password is in the error: %v", err)
					}
				}
			})
		}
	}
}

// TestUnreachableNoPassword: a client that cannot reach its server fails
// the acquisition without showing the password.
func TestUnreachableNoPassword(t *testing.T) {
	const pw = "pa?ss@w%25rd-secret"
	u := "etcd://dlock:" + pw + "@127.0.0.1:1/x?dial_timeout=200ms"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := dlock.Open(ctx, u)
	if err == nil {
		defer l.Close()
		actx, acancel := context.WithTimeout(ctx, time.Second)
		defer acancel()
		_, err = l.TryAcquire(actx, "n", nil)
	}
	if err == nil {
		t.Fatal("acquired on an unreachable server")
	}
	for _, s := range driver.Secrets(u) {
		if secrettest.Leaks(err.Error(), "", s) {
			t.Errorf("the password is in the error: %v", err)
		}
	}
	t.Log(err)
}

// TestDefaultPrefix: the test hooks find a URL's keys where the driver
// puts them when the URL names no prefix.
func TestDefaultPrefix(t *testing.T) {
	if DefaultPrefix != layout.EtcdDefaultPrefix {
		t.Errorf("DefaultPrefix %q, layout.EtcdDefaultPrefix %q", DefaultPrefix, layout.EtcdDefaultPrefix)
	}
	if _, err := OpenLocker(nil, nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("OpenLocker(nil) = %v", err)
	}
}

// TestTTLSeconds: a TTL becomes whole seconds rounded up, never down.
func TestTTLSeconds(t *testing.T) {
	for ttl, want := range map[time.Duration]int64{
		MinTTL: 2, 2*time.Second + time.Nanosecond: 3, 2500 * time.Millisecond: 3, MaxTTL: 315_360_000, time.Millisecond: 1,
	} {
		if got := ttlSeconds(ttl); got != want {
			t.Errorf("ttlSeconds(%v) = %d, want %d", ttl, got, want)
		}
	}
}
