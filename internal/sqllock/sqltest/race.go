//go:build race

package sqltest

// raceEnabled: the race detector makes each cycle ~5x slower.
const raceEnabled = true
