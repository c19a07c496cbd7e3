package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// FormatCPUs writes a sorted CPU set as Linux's lists do (the
// Cpus_allowed_list of /proc/<pid>/status): "0", "0-1", "0,2-5".
func FormatCPUs(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
