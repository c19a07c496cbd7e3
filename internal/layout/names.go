package layout

import "strings"

// TrickyNames are lock names that a naive layout gets wrong: slashes, dots,
// percent signs, braces, control and non-BMP characters, the reserved
// "zookeeper", and the longest escapes. The layout tests and the drivers'
// tests use them.
var TrickyNames = []string{
	"a", "orders/42", "/", "//", "a/", "/a", ".", "..", "...", "./a", "a/..", "%", "%2F", "%252F", "%2E", "%2E%2E",
	"zookeeper", "/zookeeper", "zookeeper/quota", "a b", "tab\there", "nul\x00byte", "\x01\x1f\x7f",
	"\u0080\u009f", "é", "中文", "\U0001F600", "\uE000", "\uF8FF", "\uF900", "\uFFEF", "\uFFF0", "\uFFFD", "\uFFFF",
	"_c_0123456789abcdef0123456789abcdef-lock-0000000001", "lock", strings.Repeat("x", 1024),
	"}", "{", "a}b", "{a}", "}%7D", "%7D",
	// The longest escapes: 1024 bytes that all need escaping (3072 bytes).
	strings.Repeat("\U0001F600", 256), strings.Repeat("\x01", 1024), strings.Repeat("/", 1024),
}
