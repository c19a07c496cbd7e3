package bench

import "io"

// Verdict is what a run concludes: the answer a team reads first, at the
// top of index.html and of the terminal output. Decide builds it from the
// rows of a finalized report.
type Verdict struct {
	// Workloads: per workload configuration, who wins.
	Workloads []WorkloadVerdict `json:"workloads"`
	// Safety puts safety beside speed for every dlock backend/strategy.
	Safety []SafetyRow `json:"safety"`
	// Claims answers the seed articles' three claims.
	Claims []Claim `json:"claims"`
	// Paragraph is one paragraph a team could paste into a design document.
	Paragraph string `json:"paragraph"`
	// Caveats: what the figures do not carry (machine-specific absolute
	// figures, wide intervals, the machine's load during the run).
	Caveats []string `json:"caveats,omitempty"`
}

// WorkloadVerdict names the winner of one workload configuration.
type WorkloadVerdict struct {
	Label string `json:"label"`
	// Metric is what decides ("lock use p50, lower is better",
	// "grants/s, higher is better").
	Metric string `json:"metric"`
	// Winners has one target, or several when their intervals overlap
	// (Tie); RunnersUp are the others within the winner's interval.
	Winners   []string `json:"winners"`
	Tie       bool     `json:"tie"`
	RunnersUp []string `json:"runners_up,omitempty"`
	// Text says it in a sentence, with the figures.
	Text string `json:"text"`
}

// SafetyRow is one dlock backend/strategy: what it guarantees and what it
// costs. Unknown or not applicable facts are "".
type SafetyRow struct {
	Target          string `json:"target"`
	Fencing         string `json:"fencing_token"`
	SurvivesRestart string `json:"survives_restart"`
	Fair            string `json:"fair"`
	Waiters         string `json:"waiters"` // "woken" or "polling"
	FreedAfterCrash string `json:"freed_after_crash"`
	LostLease       string `json:"lost_lease_signal"`
	// FaultViolations is the violations the fault suite measured, nil
	// when its report is not available.
	FaultViolations *int `json:"fault_violations"`
	// Speed: the uncontended lock use and the handoff rate, with units.
	UseNs         float64 `json:"use_ns"`
	HandoffPerSec float64 `json:"handoff_grants_per_sec"`
}

// Claim is one of the seed articles' claims and what this run says of it.
type Claim struct {
	Claim string `json:"claim"`
	// Answer is "confirmed", "refuted", "depends on strategy" or "not
	// measured".
	Answer string `json:"answer"`
	// Figures are the figures that decide it.
	Figures string `json:"figures"`
}

// Decide builds the verdict of a finalized report.
func Decide(rep *Report) *Verdict { return &Verdict{} }

// WriteText prints the verdict for the terminal, before the tables.
func (v *Verdict) WriteText(w io.Writer) {}
