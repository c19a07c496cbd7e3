package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// FormatCPUs writes a sorted CPU set as Linux's lists do: "0", "0,1",
// "2-5".
func FormatCPUs(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j > i+1 {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		} else {
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(cpus[k]))
			}
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
