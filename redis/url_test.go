package redis

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url   string
		check func(t *testing.T, c *config)
	}{
		{"redis://127.0.0.1:6380/2", func(t *testing.T, c *config) {
			o := c.options(c.addrs[0])
			if o.Addr != "127.0.0.1:6380" || o.DB != 2 || o.TLSConfig != nil || c.prefix != DefaultPrefix || !o.ContextTimeoutEnabled {
				t.Errorf("%+v", o)
			}
		}},
		{"redis://localhost", func(t *testing.T, c *config) {
			if c.addrs[0] != "localhost:6379" || c.db != 0 {
				t.Errorf("%+v", c)
			}
			// A Locker's goroutines do not queue for connections below 64
			// at once (defaultPoolSize).
			if o := c.options(c.addrs[0]); o.PoolSize < minPoolSize || o.PoolSize < 10*runtime.GOMAXPROCS(0) {
				t.Errorf("default PoolSize %d, want at least %d and 10 per CPU", o.PoolSize, minPoolSize)
			}
			if o := c.clusterOptions(); o.PoolSize != defaultPoolSize() {
				t.Errorf("default cluster PoolSize %d, want %d", o.PoolSize, defaultPoolSize())
			}
		}},
		{"rediss://user:pw@example.com:6390/0?skip_verify=true&prefix=app:&dial_timeout=2s&read_timeout=500ms&write_timeout=250&pool_size=7&min_idle_conns=2&max_retries=0&client_name=me&pool_timeout=3s", func(t *testing.T, c *config) {
			o := c.options(c.addrs[0])
			if o.TLSConfig == nil || o.TLSConfig.ServerName != "example.com" || !o.TLSConfig.InsecureSkipVerify ||
				o.Username != "user" || o.Password != "pw" || c.prefix != "app:" || o.DialTimeout != 2*time.Second ||
				o.ReadTimeout != 500*time.Millisecond || o.WriteTimeout != 250*time.Millisecond || o.PoolSize != 7 ||
				o.MinIdleConns != 2 || o.MaxRetries != -1 || o.ClientName != "me" || o.PoolTimeout != 3*time.Second {
				t.Errorf("%+v", o)
			}
		}},
		{"redis+cluster://127.0.0.1:7000,127.0.0.1:7001?tls=true&max_retries=2", func(t *testing.T, c *config) {
			o := c.clusterOptions()
			if len(o.Addrs) != 2 || o.TLSConfig == nil || o.TLSConfig.ServerName != "127.0.0.1" || o.MaxRetries != 2 {
				t.Errorf("%+v", o)
			}
		}},
		{"redlock://a:1,b:2,c:3/1?node_timeout=20ms&tls=true", func(t *testing.T, c *config) {
			if len(c.addrs) != 3 || c.nodeTimeout != 20*time.Millisecond || c.db != 1 {
				t.Errorf("%+v", c)
			}
			if o := c.options(c.addrs[1]); o.TLSConfig.ServerName != "b" || o.MaxRetries != -1 || o.DialerRetries != 1 {
				t.Errorf("node b: %+v", o)
			}
		}},
		{"redlock://a:1,b:2,c:3", func(t *testing.T, c *config) {
			if c.nodeTimeout != DefaultNodeTimeout || c.tls != nil {
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

func TestBadURLs(t *testing.T) {
	const secret = "s3cr%65t-pw"
	for _, u := range []string{
		"redis://u:" + secret + "@127.0.0.1:1/0?bogus=1",
		"redis://u:" + secret + "@127.0.0.1:1/x",
		"redis://u:" + secret + "@127.0.0.1:1,127.0.0.1:2/0",
		"redis://u:" + secret + "@127.0.0.1:1/0?node_timeout=1s",
		"redis://u:" + secret + "@127.0.0.1:1/0?tls=true",
		"redis://u:" + secret + "@127.0.0.1:1/0?prefix=a{b",
		"redis://u:" + secret + "@127.0.0.1:1/0?pool_size=0",
		"redis://u:" + secret + "@127.0.0.1:1/0?dial_timeout=soon",
		"redis://u:" + secret + "@127.0.0.1:1/0?skip_verify=true",
		"redis://u:" + secret + "@127.0.0.1:99999/0",
		"redis://u:" + secret + "@:1/0",
		"redis+cluster://u:" + secret + "@127.0.0.1:1/3",
		"redlock://u:" + secret + "@a:1,b:2,c:3?node_timeout=0",
		"redlock://u:" + secret + "@a:1,,c:3",
		"redis://u:" + secret + "@127.0.0.1:1/0?prefix=a&prefix=b",
		"redis://u:" + secret + "@[::1/0",
	} {
		t.Run(u, func(t *testing.T) {
			_, err := dlock.Open(context.Background(), u)
			if !errors.Is(err, dlock.ErrInvalidOption) {
				t.Fatalf("Open: %v, want ErrInvalidOption", err)
			}
			for _, s := range []string{secret, "s3cret-pw"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the password is in the error: %v", err)
				}
			}
			t.Log(err)
		})
	}
}
