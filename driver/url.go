package driver

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Params reads a URL's query parameters by name and type, and reports
// every parameter that no one asked for: drivers reject unknown parameters
// rather than ignore a typo. Read each known parameter once, then call Err.
type Params struct {
	values url.Values
	used   map[string]bool
	errs   []error
}

// NewParams returns a Params over v.
func NewParams(v url.Values) *Params {
	return &Params{values: v, used: make(map[string]bool)}
}

func (p *Params) get(key string) (string, bool) {
	p.used[key] = true
	vs, ok := p.values[key]
	if !ok || len(vs) == 0 {
		return "", false
	}
	if len(vs) > 1 {
		p.errs = append(p.errs, fmt.Errorf("parameter %q given %d times", key, len(vs)))
	}
	return vs[len(vs)-1], true
}

// Has reports whether key was given (and marks it as known).
func (p *Params) Has(key string) bool {
	_, ok := p.get(key)
	return ok
}

// String returns the value of key, or def when it is absent.
func (p *Params) String(key, def string) string {
	if v, ok := p.get(key); ok {
		return v
	}
	return def
}

// Enum returns the value of key, which must be one of allowed; def when absent.
func (p *Params) Enum(key, def string, allowed ...string) string {
	v, ok := p.get(key)
	if !ok {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	p.errs = append(p.errs, fmt.Errorf("parameter %s=%q: want one of %s", key, v, strings.Join(allowed, ", ")))
	return def
}

// Duration returns the value of key parsed by time.ParseDuration (a bare
// integer is read as milliseconds), or def when absent. Negative values are
// an error.
func (p *Params) Duration(key string, def time.Duration) time.Duration {
	v, ok := p.get(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		if n, err2 := strconv.ParseInt(v, 10, 64); err2 == nil {
			d, err = time.Duration(n)*time.Millisecond, nil
		}
	}
	if err != nil || d < 0 {
		p.errs = append(p.errs, fmt.Errorf("parameter %s=%q: want a non-negative duration such as 10s or 500ms", key, v))
		return def
	}
	return d
}

// Int returns the value of key as an int within [min, max], or def.
func (p *Params) Int(key string, def, min, max int) int {
	v, ok := p.get(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		p.errs = append(p.errs, fmt.Errorf("parameter %s=%q: want an integer from %d to %d", key, v, min, max))
		return def
	}
	return n
}

// Bool returns the value of key as a bool (true/false/1/0), or def.
func (p *Params) Bool(key string, def bool) bool {
	v, ok := p.get(key)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("parameter %s=%q: want true or false", key, v))
		return def
	}
	return b
}

// Rest returns the parameters not read so far, without marking them unknown:
// for drivers that pass the remaining parameters on to a client library.
func (p *Params) Rest() url.Values {
	out := url.Values{}
	for k, vs := range p.values {
		if !p.used[k] {
			out[k] = vs
		}
	}
	return out
}

// Err returns an error wrapping ErrInvalidOption that names every unknown
// parameter and every malformed value, or nil.
func (p *Params) Err() error {
	var unknown []string
	for k := range p.values {
		if !p.used[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	errs := p.errs
	if len(unknown) > 0 {
		known := make([]string, 0, len(p.used))
		for k := range p.used {
			known = append(known, k)
		}
		sort.Strings(known)
		errs = append(errs, fmt.Errorf("unknown URL parameter(s) %s (known: %s)", strings.Join(unknown, ", "), strings.Join(known, ", ")))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOption, errors.Join(errs...))
}

// Redact returns raw with any password replaced by "xxxxx": the password of
// the userinfo (scheme://user:password@host) and the values of query
// parameters named password, pass, passwd or pwd. It works on strings that
// url.Parse rejects, such as MySQL's "user:pass@tcp(host:3306)/db".
func Redact(raw string) string {
	s := raw
	prefix := ""
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, s = s[:i+3], s[i+3:]
	}
	query := ""
	if i := strings.IndexByte(s, '?'); i >= 0 {
		s, query = s[:i], s[i:]
	}
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		userinfo := s[:at]
		if c := strings.IndexByte(userinfo, ':'); c >= 0 {
			s = userinfo[:c] + ":xxxxx" + s[at:]
		}
	}
	if query != "" {
		parts := strings.Split(query[1:], "&")
		for i, kv := range parts {
			k, _, found := strings.Cut(kv, "=")
			switch strings.ToLower(k) {
			case "password", "pass", "passwd", "pwd":
				if found {
					parts[i] = k + "=xxxxx"
				}
			}
		}
		query = "?" + strings.Join(parts, "&")
	}
	return prefix + s + query
}

// Secrets returns the passwords that Redact would hide in raw, both as
// written and percent-decoded, so that an error message built by a client
// library can be scrubbed of them.
func Secrets(raw string) []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		out = append(out, s)
		if d, err := url.PathUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
	}
	s := raw
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	query := ""
	if i := strings.IndexByte(s, '?'); i >= 0 {
		s, query = s[:i], s[i+1:]
	}
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		if _, pw, ok := strings.Cut(s[:at], ":"); ok {
			add(pw)
		}
	}
	for _, kv := range strings.Split(query, "&") {
		k, v, ok := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "password", "pass", "passwd", "pwd":
			if ok {
				add(v)
			}
		}
	}
	return out
}
