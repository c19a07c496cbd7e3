//go:build race

package postgres_test

const raceEnabled = true
