package captable_test

import "testing"

// sqlEntries lists the SQL backends × strategies.
func sqlEntries(t *testing.T) []struct{ shown, url string } { return nil }
