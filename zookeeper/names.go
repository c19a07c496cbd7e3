package zookeeper

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/layout"
)

// escapeName maps a lock name onto one valid znode name, injectively. The
// layout is written once, in internal/layout, which the test hooks that
// reach behind a holder's back use too.
func escapeName(name string) string { return layout.ZooKeeperName(name) }

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
			if layout.ZooKeeperForbidden(r) {
				return bad(fmt.Sprintf("character %U is not allowed in a znode path", r))
			}
		}
	}
	return nil
}
