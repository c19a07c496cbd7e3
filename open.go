package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/dlock-go/dlock/driver"
)

// Opener opens a driver from a URL. It receives the whole URL, password
// included (it must never put the password into an error: Open scrubs the
// error text anyway), and must reject parameters it does not know
// (driver.Params does that).
type Opener func(ctx context.Context, rawURL string) (driver.Locker, error)

var registry struct {
	sync.RWMutex
	openers map[string]Opener
}

// Register makes a driver available under a URL scheme. Driver packages
// call it from init. It panics if scheme is registered twice or opener is
// nil, like sql.Register.
func Register(scheme string, opener Opener) {
	registry.Lock()
	defer registry.Unlock()
	scheme = strings.ToLower(scheme)
	if opener == nil {
		panic("dlock: Register opener is nil")
	}
	if _, dup := registry.openers[scheme]; dup {
		panic("dlock: Register called twice for scheme " + scheme)
	}
	if registry.openers == nil {
		registry.openers = make(map[string]Opener)
	}
	registry.openers[scheme] = opener
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.openers))
	for s := range registry.openers {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open opens a Locker for the backend named by the URL's scheme, for
// example "redis://127.0.0.1:6379/0", "zk://127.0.0.1:2181/locks",
// "postgres://user:pass@127.0.0.1/db?strategy=advisory" or "mem://". The
// driver's package must be imported (for its side effect of registering
// the scheme). Unknown URL parameters are an error. The URL's password
// never appears in a returned error.
//
// The lines the backend's client library logs about the client Open made
// are dropped (OpenWith with an Observer receives them as EventClientLog);
// go-redis, whose logger is one for the whole process, is the exception
// (see the package doc, # Observing).
func Open(ctx context.Context, rawURL string) (*Locker, error) {
	return OpenWith(ctx, rawURL, nil)
}

// openDriver opens the driver that the URL's scheme names.
func openDriver(ctx context.Context, rawURL string) (driver.Locker, error) {
	i := strings.Index(rawURL, "://")
	if i <= 0 || !validScheme(rawURL[:i]) {
		return nil, fmt.Errorf("dlock: open: %w: malformed URL %q: want scheme://...", ErrInvalidOption, driver.Redact(rawURL))
	}
	scheme := strings.ToLower(rawURL[:i])
	registry.RLock()
	opener := registry.openers[scheme]
	registry.RUnlock()
	if opener == nil {
		return nil, fmt.Errorf("dlock: open: %w: unknown URL scheme %q (registered: %s; forgotten import?)",
			ErrInvalidOption, scheme, strings.Join(Schemes(), ", "))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	drv, err := opener(ctx, rawURL)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && isContextErr(err) {
			return nil, ctxErr
		}
		return nil, &scrubbed{err: err, msg: "dlock: open " + driver.Redact(rawURL) + ": " + driver.Scrub(err.Error(), rawURL)}
	}
	return drv, nil
}

// validScheme reports whether s is an RFC 3986 scheme (so that text
// before a "://" in a password is never printed as one).
func validScheme(s string) bool {
	for i, c := range s {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// scrubbed is dlock.Open's error: "dlock: open <redacted URL>: " and the
// driver's message scrubbed of the URL's secrets (driver.Scrub); errors.Is
// and errors.As still see the driver's error.
type scrubbed struct {
	err error
	msg string
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
