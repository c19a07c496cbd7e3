package driver

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
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

// shown is a parameter's value as an error shows it: quoted, or hidden
// when the parameter carries a secret.
func shown(key, v string) string {
	if SecretParam(key) {
		return "xxxxx"
	}
	return strconv.Quote(v)
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
	p.errs = append(p.errs, fmt.Errorf("parameter %s=%s: want one of %s", key, shown(key, v), strings.Join(allowed, ", ")))
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
		p.errs = append(p.errs, fmt.Errorf("parameter %s=%s: want a non-negative duration such as 10s or 500ms", key, shown(key, v)))
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
		p.errs = append(p.errs, fmt.Errorf("parameter %s=%s: want an integer from %d to %d", key, shown(key, v), min, max))
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
		p.errs = append(p.errs, fmt.Errorf("parameter %s=%s: want true or false", key, shown(key, v)))
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

// # How a URL is taken apart
//
// Every driver reads its URL with ParseURL, and Redact, Secrets and Scrub
// take it apart the same way, so that what a driver uses as the password
// is what they hide. The syntax is RFC 3986's, widened for passwords as
// people write them (url.Parse rejects or misreads most of these):
//
//	scheme://[user[:password]@]host[:port][,host[:port]...][/path][?query]
//
// The userinfo ends at the last '@' before the first '?' or '#' (so a
// password may contain raw '@', ':' and '/'; an '@' in the path must be
// written %40). When that reading is implausible (no '@' before the first
// '?' or '#' and the text before it is not a host list, or a query key
// holds an '@', or the would-be fragment does) and an '@' follows, the
// userinfo ends at the last '@' of the URL instead: a password with a raw
// '?' or '#'. The host part ends at the first '/', '?' or '#' after the
// userinfo, or after the ')' of go-sql-driver's "tcp(host:port)" form.
// User, password and path are percent-decoded ("+" stays "+"); the query
// is read as url.ParseQuery reads it. Percent-encoding every reserved
// character of a password ('%' as %25) is always unambiguous.

// URL is a dlock URL taken apart the way every driver reads it.
type URL struct {
	// Scheme is the scheme, lower case.
	Scheme string
	// User and Password are the decoded userinfo; HasUserinfo and
	// HasPassword tell an empty one from an absent one.
	User, Password           string
	HasUserinfo, HasPassword bool
	// Host is the authority after the userinfo, as written: "h:p",
	// "h1:p1,h2:p2" or "tcp(h:p)". Hosts is Host split at commas (nil when
	// Host is empty).
	Host  string
	Hosts []string
	// Path is the decoded path ("" or starting with '/'); RawPath is the
	// path as written.
	Path, RawPath string
	// Query is the decoded query; Params reads it.
	Query  url.Values
	Params *Params
}

// ParseURL takes a dlock URL apart. Its errors wrap ErrInvalidOption and
// never contain the password or a secret parameter's value. A malformed
// query (a ';', a bad escape) is an error, not a dropped parameter.
func ParseURL(raw string) (*URL, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
	p := split(raw)
	if p.scheme == "" {
		return nil, bad("malformed URL: want scheme://...")
	}
	if p.hasFragment {
		return nil, bad("a URL fragment is not allowed (percent-encode a hash sign in a password as %%23)")
	}
	u := &URL{Scheme: strings.ToLower(p.scheme), Host: p.host, RawPath: p.path}
	if p.hasUserinfo {
		u.HasUserinfo = true
		user, pw, hasPW := strings.Cut(p.userinfo, ":")
		var err1, err2 error
		u.User, err1 = url.PathUnescape(user)
		u.Password, err2 = url.PathUnescape(pw)
		if err1 != nil || err2 != nil {
			return nil, bad("malformed percent-encoding in the user or password (percent-encode a percent sign as %%25)")
		}
		u.HasPassword = hasPW
	}
	if p.host != "" {
		u.Hosts = strings.Split(p.host, ",")
	}
	path, err := url.PathUnescape(p.path)
	if err != nil {
		return nil, bad("malformed percent-encoding in the path %q", p.path)
	}
	u.Path = path
	q, err := parseQuery(p.query)
	if err != nil {
		return nil, bad("%v", err)
	}
	u.Query = q
	u.Params = NewParams(q)
	return u, nil
}

// parseQuery is url.ParseQuery with an error that names the bad pair
// (with a secret parameter's value hidden).
func parseQuery(query string) (url.Values, error) {
	m := url.Values{}
	for query != "" {
		var pair string
		pair, query, _ = strings.Cut(query, "&")
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		show := pair
		if SecretParam(k) {
			show = k + "=xxxxx"
		}
		if strings.Contains(pair, ";") {
			return nil, fmt.Errorf("malformed query parameter %q: a semicolon is not a separator (use an ampersand; percent-encode a semicolon in a value as %%3B)", show)
		}
		key, err1 := url.QueryUnescape(k)
		value, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("malformed query parameter %q: bad percent-encoding", show)
		}
		if SecretParam(key) {
			show = key + "=xxxxx"
		}
		if key == "" {
			return nil, fmt.Errorf("malformed query parameter %q: empty name", show)
		}
		m[key] = append(m[key], value)
	}
	return m, nil
}

// SecretParam reports whether the query parameter key carries a secret
// (password, sslpassword, passwd, pwd, secret, token, ...). Redact hides
// its value. Flags such as allowCleartextPasswords and file names such as
// passfile or sslkey are not secrets.
func SecretParam(key string) bool {
	k := strings.ToLower(key)
	if strings.HasPrefix(k, "allow") {
		return false
	}
	switch k {
	case "pass", "pwd", "token", "auth", "apikey", "api_key", "access_key":
		return true
	}
	return strings.Contains(k, "password") || strings.Contains(k, "passwd") || strings.Contains(k, "secret")
}

// parts is a URL split into its pieces as written, never failing.
type parts struct {
	prefix, scheme string // "scheme://" and "scheme"; empty without one
	userinfo       string
	hasUserinfo    bool
	host, path     string
	query          string
	hasQuery       bool
	fragment       string
	hasFragment    bool
}

func split(raw string) parts {
	var p parts
	rest := raw
	if i := strings.Index(raw, "://"); i > 0 && validScheme(raw[:i]) {
		p.prefix, p.scheme, rest = raw[:i+3], raw[:i], raw[i+3:]
	}
	if at := userinfoEnd(rest); at >= 0 {
		p.userinfo, p.hasUserinfo, rest = rest[:at], true, rest[at+1:]
	}
	h := hostEnd(rest)
	p.host, rest = rest[:h], rest[h:]
	i := strings.IndexAny(rest, "?#")
	if i < 0 {
		i = len(rest)
	}
	p.path, rest = rest[:i], rest[i:]
	if strings.HasPrefix(rest, "?") {
		p.hasQuery = true
		p.query, p.fragment, p.hasFragment = strings.Cut(rest[1:], "#")
		return p
	}
	if strings.HasPrefix(rest, "#") {
		p.hasFragment, p.fragment = true, rest[1:]
	}
	return p
}

func validScheme(s string) bool {
	for i, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// userinfoEnd returns the index of the '@' that ends the userinfo in rest
// (the URL after "scheme://"), or -1. See "How a URL is taken apart".
func userinfoEnd(rest string) int {
	q := strings.IndexAny(rest, "?#")
	if q < 0 {
		return strings.LastIndexByte(rest, '@')
	}
	at := strings.LastIndexByte(rest[:q], '@')
	if last := strings.LastIndexByte(rest, '@'); last > q && !plausible(rest[at+1:]) {
		return last
	}
	return at
}

// plausible reports whether s, a URL after its userinfo, reads as
// host[/path][?query] with a host list and no '@' in a query key or a
// fragment: the signs of a password with a raw '?' or '#' read wrongly.
func plausible(s string) bool {
	h := hostEnd(s)
	if !plausibleHosts(s[:h]) {
		return false
	}
	s = s[h:]
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[i:]
	} else {
		return true
	}
	query, frag, hasFrag := "", "", false
	if s[0] == '?' {
		query, frag, hasFrag = strings.Cut(s[1:], "#")
	} else {
		frag, hasFrag = s[1:], true
	}
	if hasFrag && strings.Contains(frag, "@") {
		return false
	}
	for _, kv := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		k, _, _ := strings.Cut(kv, "=")
		if strings.Contains(k, "@") {
			return false
		}
	}
	return true
}

// hostEnd returns the end of the host part at the start of s.
func hostEnd(s string) int {
	if i := strings.IndexByte(s, '('); i > 0 && isWord(s[:i]) {
		if j := strings.IndexByte(s[i:], ')'); j >= 0 {
			return i + j + 1
		}
	}
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		return i
	}
	return len(s)
}

func isWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isWordByte(s[i]) {
			return false
		}
	}
	return s != ""
}

func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// plausibleHosts reports whether s is empty, a "net(addr)" address or a
// comma-separated list of host[:port].
func plausibleHosts(s string) bool {
	if s == "" || strings.HasSuffix(s, ")") {
		return true
	}
	for _, h := range strings.Split(s, ",") {
		host, port := h, ""
		if strings.HasPrefix(h, "[") {
			end := strings.IndexByte(h, ']')
			if end < 0 {
				return false
			}
			host, port = h[1:end], h[end+1:]
			if port != "" && port[0] != ':' {
				return false
			}
		} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
			host, port = h[:i], h[i:]
		}
		if host == "" {
			return false
		}
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !isWordByte(c) && !strings.ContainsRune(".-~%:", rune(c)) {
				return false
			}
		}
		if port != "" {
			if len(port) == 1 {
				return false
			}
			for i := 1; i < len(port); i++ {
				if port[i] < '0' || port[i] > '9' {
					return false
				}
			}
		}
	}
	return true
}

// Redact returns raw with every secret replaced by "xxxxx": the password
// of the userinfo and the value of every secret-bearing query parameter
// (SecretParam), and any text that another reading of an ambiguous URL
// would take for a password. A fragment is hidden whole. It never fails
// and works on strings without a scheme, such as MySQL's
// "user:pass@tcp(host:3306)/db".
func Redact(raw string) string {
	p := split(raw)
	var b strings.Builder
	b.WriteString(p.prefix)
	if p.hasUserinfo {
		user, _, hasPW := strings.Cut(p.userinfo, ":")
		b.WriteString(user)
		if hasPW {
			b.WriteString(":xxxxx")
		}
		b.WriteByte('@')
	}
	b.WriteString(p.host)
	b.WriteString(p.path)
	if p.hasQuery {
		b.WriteByte('?')
		b.WriteString(redactQuery(p.query))
	}
	if p.hasFragment && !(p.hasQuery && lastSecret(p.query)) {
		// (After a secret parameter, the '#' was in its value, which
		// "xxxxx" stands for whole.)
		b.WriteString("#xxxxx")
	}
	out := b.String()
	// Another reading of the URL (a password with a raw '?' or '#', or one
	// whose '@' lies beyond) must not show what it would take for a
	// password either.
	_, other := readings(raw)
	sort.SliceStable(other, func(i, j int) bool { return len(other[i]) > len(other[j]) })
	for _, s := range other {
		out = replaceSecret(out, s)
	}
	return out
}

// redactQuery hides the values of secret parameters in a raw query,
// splitting at '&' and ';' (which some clients take as a separator).
func redactQuery(q string) string {
	var b strings.Builder
	start := 0
	for i := 0; i <= len(q); i++ {
		if i < len(q) && q[i] != '&' && q[i] != ';' {
			continue
		}
		kv := q[start:i]
		k, _, found := strings.Cut(kv, "=")
		dk, err := url.QueryUnescape(k)
		if err != nil {
			dk = k
		}
		if found && (SecretParam(k) || SecretParam(dk)) {
			kv = k + "=xxxxx"
		}
		b.WriteString(kv)
		if i < len(q) {
			b.WriteByte(q[i])
		}
		start = i + 1
	}
	return b.String()
}

// lastSecret reports whether the last parameter of a raw query carries a
// secret.
func lastSecret(q string) bool {
	kv := q[strings.LastIndexAny(q, "&;")+1:]
	k, _, found := strings.Cut(kv, "=")
	dk, err := url.QueryUnescape(k)
	if err != nil {
		dk = k
	}
	return found && (SecretParam(k) || SecretParam(dk))
}

// readings returns the secrets of raw as written: own, those of the
// reading ParseURL makes (the userinfo's password, the values of secret
// parameters, a fragment), and other, those of the other readings of an
// ambiguous URL: the text between the first ':' and the URL's last '@',
// and the values of secret parameters read from the first '?' on, whole
// and cut at a '#' or at their last '@'.
func readings(raw string) (own, other []string) {
	p := split(raw)
	if p.hasUserinfo {
		if _, pw, ok := strings.Cut(p.userinfo, ":"); ok {
			own = append(own, pw)
		}
	}
	if p.hasQuery {
		own = append(own, secretValues(p.query)...)
	}
	if p.hasFragment {
		own = append(own, p.fragment)
		if p.hasQuery && lastSecret(p.query) {
			vs := secretValues(p.query)
			own = append(own, vs[len(vs)-1]+"#"+p.fragment)
		}
	}
	rest := raw[len(p.prefix):]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
			other = append(other, pw)
		}
	}
	if _, q, ok := strings.Cut(rest, "?"); ok {
		for _, v := range secretValues(q) {
			other = append(other, v)
			if i := strings.IndexByte(v, '#'); i >= 0 {
				other = append(other, v[:i])
			}
			if i := strings.LastIndexByte(v, '@'); i >= 0 {
				other = append(other, v[:i])
			}
		}
	}
	other = slices.DeleteFunc(other, func(s string) bool { return s == "" || slices.Contains(own, s) })
	return own, other
}

// secretValues returns the values of the secret parameters of a raw
// query, splitting at '&' and ';'.
func secretValues(q string) []string {
	var out []string
	for _, kv := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, found := strings.Cut(kv, "=")
		dk, err := url.QueryUnescape(k)
		if err != nil {
			dk = k
		}
		if found && (SecretParam(k) || SecretParam(dk)) {
			out = append(out, v)
		}
	}
	return out
}

// Secrets returns the secrets of raw (see Redact) as written, decoded and
// re-encoded, so that text built by a client library can be scrubbed of
// them (Scrub). It includes what other readings of an ambiguous URL would
// take for a password.
func Secrets(raw string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	own, other := readings(raw)
	for _, s := range append(own, other...) {
		add(s)
		for _, d := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if d, err := d(s); err == nil {
				add(d)
				add(url.PathEscape(d))
				add(url.QueryEscape(d))
				add(strings.TrimPrefix(url.UserPassword("", d).String(), ":"))
			}
		}
	}
	// Longest first: a secret that contains another is replaced whole.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// Scrub returns msg, text built by a client library from the URL raw,
// with raw's secrets hidden: raw itself becomes Redact(raw), and every
// occurrence of a secret (Secrets) that stands as a token is replaced by
// "xxxxx". A secret stands as a token where it is not glued to letters,
// digits or '_' on a side where it starts or ends with one, so a short
// password does not garble the words that contain it ("p" in "postgres")
// but is hidden where a library prints it (":p@", "password=p", "'p'").
// Text equal to Redact(raw) is left as it is.
func Scrub(msg, raw string) string {
	if raw == "" {
		return msg
	}
	red := Redact(raw)
	msg = strings.ReplaceAll(msg, raw, red)
	if red == "" {
		red = "\x00"
	}
	secrets := Secrets(raw)
	if len(secrets) == 0 {
		return msg
	}
	// Scrub the text between the redacted URLs, not the URLs themselves.
	pieces := strings.Split(msg, red)
	for i, piece := range pieces {
		for _, s := range secrets {
			piece = replaceSecret(piece, s)
		}
		pieces[i] = piece
	}
	return strings.Join(pieces, red)
}

// replaceSecret replaces the occurrences of s in msg that stand as a
// token (see Scrub) by "xxxxx".
func replaceSecret(msg, s string) string {
	if s == "" || !strings.Contains(msg, s) {
		return msg
	}
	wordStart, wordEnd := isWordByte(s[0]), isWordByte(s[len(s)-1])
	glue := func(c byte) bool { return isWordByte(c) || c == '.' }
	var b strings.Builder
	for {
		i := strings.Index(msg, s)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		end := i + len(s)
		glued := (wordStart && i > 0 && glue(msg[i-1])) || (wordEnd && end < len(msg) && glue(msg[end]))
		if glued {
			b.WriteString(msg[:i+1])
			msg = msg[i+1:]
			continue
		}
		b.WriteString(msg[:i])
		b.WriteString("xxxxx")
		msg = msg[end:]
	}
}
