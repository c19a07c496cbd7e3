//go:build !race

package sqltest

const raceEnabled = false
