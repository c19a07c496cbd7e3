package zookeeper

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
)

// escapeName maps a lock name onto one valid znode name, injectively:
//
//   - '%' and '/' are percent-escaped (%25, %2F), as is every byte of a code
//     point that ZooKeeper refuses in a path: U+0000–U+001F, U+007F–U+009F,
//     U+D800–U+F8FF, U+FFF0–U+FFFF, and everything above U+FFFF (the server
//     checks Java UTF-16 units, and such code points are surrogate pairs);
//   - the names "." and ".." become "%2E" and "%2E%2E";
//   - every other character stands for itself, so readable names stay
//     readable in zkCli.
//
// Because '%' is always escaped, unescapeName inverts it exactly, which makes
// the mapping injective: two lock names never share a znode. The reserved
// "/zookeeper" subtree cannot be reached: a lock's node is always below a
// prefix that is not the root (validatePrefix).
func escapeName(name string) string {
	if name == "." || name == ".." {
		return strings.Repeat("%2E", len(name))
	}
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		if r == '%' || r == '/' || forbiddenRune(r) || (r == utf8.RuneError && size == 1) {
			for _, c := range []byte(name[i : i+size]) {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		} else {
			b.WriteString(name[i : i+size])
		}
		i += size
	}
	return b.String()
}

// unescapeName inverts escapeName.
func unescapeName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("zookeeper: truncated escape in %q", s)
		}
		var c byte
		if _, err := fmt.Sscanf(s[i+1:i+3], "%02X", &c); err != nil {
			return "", fmt.Errorf("zookeeper: bad escape in %q", s)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

// forbiddenRune reports whether ZooKeeper's PathUtils.validatePath refuses r
// (it checks UTF-16 units; code points above U+FFFF are surrogates there).
func forbiddenRune(r rune) bool {
	return r < 0x20 ||
		(r >= 0x7F && r <= 0x9F) ||
		(r >= 0xD800 && r <= 0xF8FF) ||
		r >= 0xFFF0
}

// validatePrefix checks the path under which lock nodes live: absolute, not
// the root, not in the reserved /zookeeper subtree, no empty, "." or ".."
// element, no character the server refuses, no trailing slash.
func validatePrefix(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("zookeeper: prefix %q: %s: %w", p, why, driver.ErrInvalidOption)
	}
	switch {
	case p == "" || p[0] != '/':
		return bad("must start with /")
	case p == "/":
		return bad("must not be the root")
	case p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/"):
		return bad("the /zookeeper subtree is reserved")
	case !utf8.ValidString(p):
		return bad("not valid UTF-8")
	}
	for _, el := range strings.Split(p[1:], "/") {
		switch el {
		case "":
			return bad("empty path element (double or trailing slash)")
		case ".", "..":
			return bad("relative path element")
		}
		for _, r := range el {
			if forbiddenRune(r) {
				return bad(fmt.Sprintf("character %U is not allowed in a znode path", r))
			}
		}
	}
	return nil
}
