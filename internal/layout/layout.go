// Package layout is where dlock's drivers keep their data on the server:
// the Redis keys of a lock name, the ZooKeeper node and the etcd key range
// of a lock name.
// The drivers compute their keys and paths here, and so do the test hooks
// that reach behind a holder's back (internal/backendtest), so that a
// change of layout cannot leave a hook acting on keys nobody uses.
package layout

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Redis are the keys and channels of one lock name. The name sits in a
// hash tag, so that in a Redis Cluster all of them hash to one slot, which
// the driver's scripts need (they touch them together).
type Redis struct {
	Lock    string // <prefix>{<name>}: the owner value, with the lease's PX
	Fence   string // <prefix>{<name>}:fence: the INCR fencing counter, never expires
	Queue   string // <prefix>{<name>}:q: Redlock: Lockers with waiters, by registration expiry
	Channel string // <prefix>{<name>}:rel: Redlock: Locker L is woken on <channel>:L
	// Single server and Cluster: the FIFO grant queue, only while some
	// waiter waits.
	Waiters    string // <prefix>{<name>}:w: waiters' grant values by arrival
	WaiterData string // <prefix>{<name>}:wd: per value, "<expiry ms> <ttl ms> <channel>"
}

// RedisKeys returns the keys of name under prefix. The strings share one
// allocation (each is a slice of it): a driver derives them on every
// acquire of a name it has not seen lately.
func RedisKeys(prefix, name string) Redis {
	tag := RedisTag(name)
	const fence, queue, channel, waiters, data = ":fence", ":q", ":rel", ":w", ":wd"
	// One concatenation, one allocation (the lock key made apart first
	// was a second, thrown away).
	s := prefix + "{" + tag + "}" + fence + prefix + "{" + tag + "}" + queue + prefix + "{" + tag + "}" + channel +
		prefix + "{" + tag + "}" + waiters + prefix + "{" + tag + "}" + data
	n := len(prefix) + len(tag) + 2
	var k Redis
	k.Lock, k.Fence = s[:n], s[:n+len(fence)]
	i := n + len(fence)
	next := func(suffix string) string {
		v := s[i : i+n+len(suffix)]
		i += n + len(suffix)
		return v
	}
	k.Queue = next(queue)
	k.Channel = next(channel)
	k.Waiters = next(waiters)
	k.WaiterData = next(data)
	return k
}

// RedisTag makes a name safe inside a hash tag. A hash tag ends at the
// first '}', so a '}' in the name would end it early (and a name starting
// with '}' would make the tag empty, scattering the keys over slots). '}'
// becomes %7D and '%' becomes %25, which keeps the mapping one-to-one.
// Names without either character are used as they are.
func RedisTag(name string) string {
	if !strings.ContainsAny(name, "}%") {
		return name
	}
	return strings.NewReplacer("%", "%25", "}", "%7D").Replace(name)
}

// ZooKeeperParent returns the node under prefix whose children are the
// queue (the holder and the waiters) of name.
func ZooKeeperParent(prefix, name string) string { return prefix + "/" + ZooKeeperName(name) }

// ZooKeeperName maps a lock name onto one valid znode name, injectively:
//
//   - '%' and '/' are percent-escaped (%25, %2F), as is every byte of a code
//     point that ZooKeeper refuses in a path: U+0000–U+001F, U+007F–U+009F,
//     U+D800–U+F8FF, U+FFF0–U+FFFF, and everything above U+FFFF (the server
//     checks Java UTF-16 units, and such code points are surrogate pairs);
//   - the names "." and ".." become "%2E" and "%2E%2E";
//   - every other character stands for itself, so readable names stay
//     readable in zkCli.
//
// Because '%' is always escaped, ZooKeeperUnname inverts it exactly, which
// makes the mapping injective: two lock names never share a znode. The
// reserved "/zookeeper" subtree cannot be reached: a lock's node is always
// below a prefix that is not the root (the driver validates its prefix).
func ZooKeeperName(name string) string {
	if name == "." || name == ".." {
		return strings.Repeat("%2E", len(name))
	}
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		if r == '%' || r == '/' || ZooKeeperForbidden(r) || (r == utf8.RuneError && size == 1) {
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

// ZooKeeperUnname inverts ZooKeeperName.
func ZooKeeperUnname(s string) (string, error) {
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

// ZooKeeperForbidden reports whether ZooKeeper's PathUtils.validatePath
// refuses r (it checks UTF-16 units; code points above U+FFFF are
// surrogates there).
func ZooKeeperForbidden(r rune) bool {
	return r < 0x20 ||
		(r >= 0x7F && r <= 0x9F) ||
		(r >= 0xD800 && r <= 0xF8FF) ||
		r >= 0xFFF0
}

// The drivers' default namespaces, used when a URL names none (the
// drivers' DefaultPrefix constants; a test checks they agree).
const (
	RedisDefaultPrefix     = "dlock:"
	ZooKeeperDefaultPrefix = "/dlock"
	EtcdDefaultPrefix      = "/dlock"
)

// EtcdQueue returns the key prefix under which the etcd driver queues the
// attempts on name: "<prefix>/<escaped name>/". Each attempt's key is the
// queue followed by its etcd lease grant's id and tag (EtcdKey).
func EtcdQueue(prefix, name string) string { return prefix + "/" + EtcdName(name) + "/" }

// EtcdKey returns the key of an attempt in queue under the etcd lease
// leaseID, granted with tag: "<queue><lease id>-<tag>", 16 lowercase hex
// digits each. An etcd lease id is unique only among live leases (the
// server may issue an expired lease's id again, and a client may name the
// id it grants); the tag, random, drawn when the lease was granted, makes
// the name that grant's own, so that a plain delete of it never deletes
// another client's key.
func EtcdKey(queue string, leaseID int64, tag uint64) string {
	b := make([]byte, 0, len(queue)+33)
	b = append(b, queue...)
	b = appendHex16(b, uint64(leaseID))
	b = append(b, '-')
	b = appendHex16(b, tag)
	return string(b)
}

// appendHex16 appends v as 16 lowercase hex digits.
func appendHex16(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[v>>uint(shift)&0xf])
	}
	return b
}

// EtcdName maps a lock name onto one etcd key element without '/',
// injectively: '%' and '/' are percent-escaped (%25, %2F), every other
// byte stands for itself (etcd keys are arbitrary bytes). Without a '/'
// the queues of two names never overlap: "a" cannot be a prefix of the
// queue of "a/b", whose element is "a%2Fb".
func EtcdName(name string) string {
	if !strings.ContainsAny(name, "%/") {
		return name
	}
	return strings.NewReplacer("%", "%25", "/", "%2F").Replace(name)
}
