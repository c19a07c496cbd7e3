package zookeeper

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Scheme is the URL scheme this package registers.
const Scheme = "zk"

// Recipes.
const (
	// RecipeFair is the default: EPHEMERAL_SEQUENTIAL children in arrival
	// order, each waiter watching its predecessor.
	RecipeFair = "fair"
	// RecipeBasic is the naive recipe: one ephemeral node per name, every
	// waiter watching it (the herd effect). Kept for comparison.
	RecipeBasic = "basic"
)

// Defaults.
const (
	DefaultPrefix         = "/dlock"
	DefaultSessionTimeout = 10 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	defaultPort           = "2181"
)

func init() { dlock.Register(Scheme, openURL) }

// Options configures OpenLocker. A nil *Options means the defaults.
type Options struct {
	// Prefix is the znode under which lock nodes live (default "/dlock").
	// It must be absolute, must not be the root or under /zookeeper; its
	// missing elements are created as persistent nodes on first use.
	Prefix string

	// Recipe is RecipeFair (default) or RecipeBasic.
	Recipe string

	// SessionTimeout is the session timeout that conn's session has (the
	// value the server negotiated: it clamps the requested timeout to
	// [2, 20] × tickTime). A lease is reported lost when the connection has
	// been down long enough for the session to have possibly expired. Zero
	// means unknown: a lease is then reported lost as soon as the
	// connection is seen down.
	SessionTimeout time.Duration

	// Events is the channel zk.Connect returned with conn. When set, the
	// Locker reads it (do not read it elsewhere) and learns of a broken
	// connection at once; without it the Locker polls conn.State every
	// 50ms.
	Events <-chan zk.Event

	// ACL is the ACL of the nodes the Locker creates (default
	// zk.WorldACL(zk.PermAll)).
	ACL []zk.ACL

	// Observer sees the Locker's events (dlock.Options.Observer).
	Observer dlock.Observer
}

type config struct {
	prefix string
	recipe string
	acl    []zk.ACL
}

func (o *Options) config() (config, error) {
	c := config{prefix: o.Prefix, recipe: o.Recipe, acl: o.ACL}
	if c.prefix == "" {
		c.prefix = DefaultPrefix
	}
	if c.recipe == "" {
		c.recipe = RecipeFair
	}
	if len(c.acl) == 0 {
		c.acl = zk.WorldACL(zk.PermAll)
	}
	if c.recipe != RecipeFair && c.recipe != RecipeBasic {
		return c, fmt.Errorf("zookeeper: recipe %q: want %s or %s: %w", c.recipe, RecipeFair, RecipeBasic, driver.ErrInvalidOption)
	}
	if err := validatePrefix(c.prefix); err != nil {
		return c, err
	}
	if err := checkSessionTimeout(o.SessionTimeout); err != nil {
		return c, fmt.Errorf("zookeeper: Options.SessionTimeout: %w", err)
	}
	return c, nil
}

// parsedURL is a zk:// URL taken apart.
type parsedURL struct {
	hosts          []string
	user, password string
	prefix         string
	recipe         string
	sessionTimeout time.Duration
	connectTimeout time.Duration
	sessions       int // at most this many sessions (shards.go)
}

// parseURL reads zk://[user:password@]host[:port][,host[:port]...][/prefix][?params].
// Errors never contain the password.
func parseURL(raw string) (*parsedURL, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("zookeeper: %s: %w", fmt.Sprintf(format, args...), driver.ErrInvalidOption)
	}
	u, err := driver.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	if u.Scheme != Scheme {
		return nil, bad("want a %s:// URL", Scheme)
	}
	p := &parsedURL{user: u.User, password: u.Password}
	if u.HasUserinfo && (u.User == "" || !u.HasPassword) {
		return nil, bad("malformed user:password@ (want digest credentials)")
	}
	if len(u.Hosts) == 0 {
		return nil, bad("missing host")
	}
	for _, h := range u.Hosts {
		if h == "" {
			return nil, bad("empty host in %q", u.Host)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
				return nil, bad("malformed host %q", h)
			}
			host, port = strings.Trim(h, "[]"), defaultPort
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 || host == "" {
			return nil, bad("malformed host %q", h)
		}
		p.hosts = append(p.hosts, net.JoinHostPort(host, port))
	}
	if u.Path == "" || u.Path == "/" {
		p.prefix = DefaultPrefix
	} else {
		p.prefix = u.Path
	}
	if err := validatePrefix(p.prefix); err != nil {
		return nil, err
	}
	params := u.Params
	p.sessionTimeout = params.Duration("session_timeout", DefaultSessionTimeout)
	p.connectTimeout = params.Duration("connect_timeout", DefaultConnectTimeout)
	p.recipe = params.Enum("recipe", RecipeFair, RecipeFair, RecipeBasic)
	p.sessions = params.Int("sessions", defaultSessions, 1, maxSessions)
	if err := params.Err(); err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	if p.sessionTimeout < 100*time.Millisecond {
		return nil, bad("session_timeout %v is below 100ms", p.sessionTimeout)
	}
	if err := checkSessionTimeout(p.sessionTimeout); err != nil {
		return nil, fmt.Errorf("zookeeper: session_timeout: %w", err)
	}
	if p.connectTimeout <= 0 {
		return nil, bad("connect_timeout must be positive")
	}
	return p, nil
}
