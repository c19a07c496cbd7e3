package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// WriteFiles writes report.json, report.csv and index.html into dir.
func (rep *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.csv"))
	if err != nil {
		return err
	}
	if err := rep.WriteCSV(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	h, err := os.Create(filepath.Join(dir, "index.html"))
	if err != nil {
		return err
	}
	if err := rep.WriteHTML(h); err != nil {
		h.Close()
		return err
	}
	return h.Close()
}

var csvHeader = []string{"backend", "family", "kind", "workload", "label", "clients", "procs",
	"p50_ns", "p99_ns", "p999_ns", "release_p50_ns", "release_p99_ns", "release_p999_ns",
	"grants", "grants_per_sec", "ideal_grants_per_sec", "ratio_to_ideal",
	"baseline_rtt_ns", "floor", "floor_ns", "ratio_to_floor", "ratio_to_rtt", "peer", "ratio_to_peer",
	"handoff_p50_ns", "handoff_p99_ns", "jain", "max_wait_ns", "violations", "fencing_violations",
	"failed_attempts_per_grant", "errors", "server_cmds_per_grant", "server_cpu_per_grant_ns", "skipped"}

// WriteCSV writes one line per row.
func (rep *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, r := range rep.Rows {
		cw.Write([]string{r.Backend, r.Family, r.Kind, r.Workload, r.Label, fmt.Sprint(r.Params["clients"]), strconv.Itoa(r.Procs),
			i(r.P50), i(r.P99), i(r.P999), i(r.ReleaseP50), i(r.ReleaseP99), i(r.ReleaseP999),
			u(r.Grants), f(r.GrantsPerSec), f(Med(r.Ideal)), f(Med(r.ToIdeal)),
			i(r.BaselineRTT), r.Floor, i(r.FloorNs), f(Med(r.ToFloor)), f(Med(r.ToRTT)), r.Peer, f(Med(r.ToPeer)),
			i(r.HandoffP50), i(r.HandoffP99), f(r.Jain), i(r.MaxWait), u(r.Violations), u(r.FencingViolations),
			f(r.FailedPerGrant), u(r.Errors), f(r.ServerCmdsPerGrant), f(r.ServerCPUPerGrantNs), r.Skipped})
	}
	cw.Flush()
	return cw.Error()
}
