// Package secrettest holds what the tests that hunt for leaked passwords
// share: the domain of passwords they fuzz, and the rule that decides
// whether a message leaks one. Only tests import it.
package secrettest

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable reports whether pw is in the fuzzed domain: a non-empty
// password of at most 64 printable characters (non-ASCII included).
func Printable(pw string) bool {
	if pw == "" || !utf8.ValidString(pw) || len(pw) > 64 {
		return false
	}
	for _, r := range pw {
		if !unicode.IsPrint(r) || r == '\uFFFD' {
			return false
		}
	}
	return true
}

// Other returns a password that shares no character with pw, to build the
// baseline message a leak is measured against.
func Other(pw string) string {
	for _, c := range "QZqzXJ" {
		if !strings.ContainsRune(pw, c) {
			return strings.Repeat(string(c), 9)
		}
	}
	return "WWWWWWWWW"
}

// Leaks reports whether msg, produced with password pw, shows pw more often
// than base, the same message produced with Other(pw): a short password
// may occur in a message by chance ("p" in "postgres"), but never more
// often than it does without being the password.
func Leaks(msg, base, pw string) bool { return strings.Count(msg, pw) > strings.Count(base, pw) }

// SameShape reports whether msg and base, produced with pw and with
// Other(pw), are the same message apart from the two passwords, digits
// (ports, durations) and characters either password uses: only then does
// Leaks compare like with like. Under load one run of a command may time
// out where the other was refused; such a pair says nothing and is run
// again.
func SameShape(msg, base, pw string) bool {
	drop := pw + Other(pw)
	strip := func(s string) string {
		return strings.Map(func(r rune) rune {
			if unicode.IsDigit(r) || strings.ContainsRune(drop, r) {
				return -1
			}
			return r
		}, s)
	}
	return strip(msg) == strip(base)
}
