package captable_test

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/testenv"
	_ "github.com/dlock-go/dlock/mysql"
	_ "github.com/dlock-go/dlock/postgres"
)

// sqlEntries lists the SQL backends × strategies.
func sqlEntries(t *testing.T) []struct{ shown, url string } {
	pg, my := testenv.Postgres(t), testenv.MySQL(t)
	with := func(u, kv string) string {
		if strings.Contains(u, "?") {
			return u + "&" + kv
		}
		return u + "?" + kv
	}
	var out []struct{ shown, url string }
	for _, s := range []string{"forupdate", "version", "advisory"} {
		out = append(out, struct{ shown, url string }{"postgres://…?strategy=" + s, with(pg.URL, "strategy="+s)})
	}
	for _, s := range []string{"forupdate", "version", "getlock"} {
		out = append(out, struct{ shown, url string }{"mysql://…?strategy=" + s, with(my.URL, "strategy="+s)})
	}
	return out
}
