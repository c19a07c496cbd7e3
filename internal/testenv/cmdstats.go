package testenv

import (
	"fmt"
	"strconv"
	"strings"
)

// RedisCommandCalls parses a Redis INFO commandstats reply into the calls
// of each command ("evalsha": 7), INFO's own included (callers that count
// what a workload cost drop it). A script's redis.call counts as a call of
// its command. A line it cannot read is an error.
func RedisCommandCalls(info string) (map[string]int64, error) {
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("testenv: commandstats line %q", line)
		}
		found := false
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("testenv: commandstats line %q: %w", line, err)
				}
				calls[name], found = n, true
			}
		}
		if !found {
			return nil, fmt.Errorf("testenv: commandstats line %q has no calls", line)
		}
	}
	return calls, nil
}
