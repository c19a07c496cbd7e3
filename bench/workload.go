package bench

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Workload kinds.
const (
	Uncontended = "uncontended" // one client, acquire + release in a loop on one name
	ManyKeys    = "manykeys"    // many clients, 10 000 names (1 000 with -quick) chosen uniformly, closed loop
	Handoff     = "handoff"     // one hot name, W waiters, hold, then work between holds
	Fairness    = "fairness"    // one hot name, 16 clients re-acquiring at once after each release
	OpenLoop    = "openloop"    // Poisson arrivals at a fraction of the measured capacity
	// Scale (scale.go) is the curves of one Locker's cost as its names,
	// leases and waiters grow; Semaphore (semaphore.go) a counting
	// semaphore with more clients than permits.
)

// Kinds lists the workload kinds in the order they run.
var Kinds = []string{Uncontended, ManyKeys, Handoff, Fairness, OpenLoop, Semaphore, Scale}

// Workload is one measured configuration. It is plain data (it crosses
// the process boundary with -procs).
type Workload struct {
	Kind string `json:"kind"`
	// Clients is the number of lock users (goroutines, or spread over
	// processes with -procs), each with its own connection or session.
	Clients int `json:"clients"`
	// Names is the number of lock names, chosen uniformly at random.
	Names int `json:"names"`
	// Hold is how long each grant is held before release.
	Hold time.Duration `json:"hold"`
	// Work is how long a client pauses after a release before it asks again.
	Work time.Duration `json:"work"`
	// Load is the open loop's arrival rate as a fraction of the target's
	// measured capacity; Rate is that rate in arrivals per second (all
	// clients together), filled in by the runner.
	Load float64 `json:"load,omitempty"`
	Rate float64 `json:"rate,omitempty"`
	// Duration is the measured time (after every client has connected and
	// made one warm-up acquire).
	Duration time.Duration `json:"duration"`
	// Fresh (uncontended only): every operation uses a name never used
	// before, as an application locking orders/42, orders/43… does, so
	// that what the first use of a name costs (a subscription, a row
	// insert, a parent node) is measured. Its Label is FreshLabel.
	Fresh bool `json:"fresh,omitempty"`
	// Axis (scale only) is the curve: ScaleNames (Names is the point),
	// ScaleLeases (Names leases held) or ScaleWaiters (Clients is the
	// point).
	Axis string `json:"axis,omitempty"`
	// Permits (semaphore only) is the semaphore's number of permits.
	Permits int `json:"permits,omitempty"`
}

// FreshLabel is the label of the uncontended workload on fresh names.
const FreshLabel = Uncontended + " fresh"

// IsFresh reports whether a row measured the uncontended workload on
// fresh names.
func (r *Row) IsFresh() bool { return r.Workload == Uncontended && r.Label == FreshLabel }

// Label names the configuration in tables: "handoff w=8 hold=1ms".
func (w Workload) Label() string {
	switch w.Kind {
	case Uncontended:
		if w.Fresh {
			return FreshLabel
		}
		return Uncontended
	case ManyKeys:
		return fmt.Sprintf("manykeys c=%d", w.Clients)
	case Handoff:
		return fmt.Sprintf("handoff w=%d hold=%v", w.Clients, w.Hold)
	case Fairness:
		return fmt.Sprintf("fairness c=%d", w.Clients)
	case OpenLoop:
		return fmt.Sprintf("openloop %d%%", int(w.Load*100+0.5))
	case Semaphore:
		return fmt.Sprintf("semaphore n=%d c=%d hold=%v", w.Permits, w.Clients, w.Hold)
	case Scale:
		switch w.Axis {
		case ScaleNames:
			return fmt.Sprintf("scale names=%d c=%d", w.Names, w.Clients)
		case ScaleLeases:
			return fmt.Sprintf("scale leases=%d", w.Names)
		case ScaleWaiters:
			return fmt.Sprintf("scale waiters=%d hold=%v", w.Clients, w.Hold)
		}
	}
	return w.Kind
}

// Params is the workload's parameters as the report prints them.
func (w Workload) Params() map[string]any {
	p := map[string]any{
		"clients":     w.Clients,
		"names":       w.Names,
		"hold":        w.Hold.String(),
		"work":        w.Work.String(),
		"duration":    w.Duration.String(),
		"gomaxprocs":  runtime.GOMAXPROCS(0),
		"lease_ttl":   LeaseTTL.String(),
		"name_choice": "uniform",
	}
	if w.Kind == OpenLoop {
		p["load"] = w.Load
		p["rate_per_sec"] = w.Rate
		p["arrivals"] = "Poisson, split evenly over the clients; latency from the intended start"
	}
	if w.Fresh {
		p["name_choice"] = "a name never used before for every operation"
	}
	if w.Kind == Semaphore {
		p["permits"] = w.Permits
		p["name_choice"] = "one semaphore"
	}
	if w.Kind == Scale {
		p["axis"] = w.Axis
		p["name_choice"] = "cycled: each goroutine its own names in turn (shared round-robin when fewer names than goroutines)"
		if w.Axis == ScaleLeases {
			p["leases"] = w.Names
			p["name_choice"] = "one name per lease"
		}
	}
	return p
}

// PlanOptions chooses the workloads of a run.
type PlanOptions struct {
	// Kinds selects workload kinds (nil: all).
	Kinds []string
	// Quick shortens every measurement: under two minutes without the
	// scale curves.
	Quick bool
	// Scale multiplies every duration (0 means 1).
	Scale float64
}

// Plan returns the workloads to run, in order. The open-loop rates are
// filled in per target by the runner from the target's many-keys capacity.
func Plan(o PlanOptions) []Workload {
	p := runtime.GOMAXPROCS(0)
	d := func(normal, quick time.Duration) time.Duration {
		v := normal
		if o.Quick {
			v = quick
		}
		if o.Scale > 0 {
			v = time.Duration(float64(v) * o.Scale)
		}
		return v
	}
	want := func(k string) bool { return len(o.Kinds) == 0 || slices.Contains(o.Kinds, k) }
	// -quick keeps one point of each workload's range that the charts and
	// the note use most, and shortens every measurement.
	mults, waiters, loads := []int{4, 16}, []int{2, 8, 32}, []float64{0.25, 0.5, 0.75}
	// Every name is taken once before the first round (warm names);
	// 10 000 first uses cost 2–7 s per SQL or ZooKeeper target, more than
	// the measurements themselves. With 2 000 names and 32 clients an
	// acquire finds its name taken about 1.5 % of the time; with 1 000
	// names and quick's 8 clients under 1 %.
	names := 2000
	if o.Quick {
		mults, waiters, loads = []int{4}, []int{8, 32}, []float64{0.5}
		names = 1000
	}
	var ws []Workload
	if want(Uncontended) {
		// One name reused, then a fresh name for every operation: 1.2 s
		// of measured time per target each (150 ms with -quick), against
		// the 3 s the one-name variant had alone. The workload's time goes
		// mostly to the switches between slices (a warm-up operation, a
		// server reading), whose number follows the duration: the two
		// variants then take about the time one took (3m42s for both at
		// 1.5 s each on the project's 2-CPU VM, 1m52s + 1m50s).
		for _, fresh := range []bool{false, true} {
			ws = append(ws, Workload{Kind: Uncontended, Clients: 1, Names: 1, Fresh: fresh,
				Duration: d(1200*time.Millisecond, 150*time.Millisecond)})
		}
	}
	if want(ManyKeys) {
		for _, m := range mults {
			ws = append(ws, Workload{Kind: ManyKeys, Clients: m * p, Names: names, Duration: d(time.Second, 250*time.Millisecond)})
		}
	}
	if want(Handoff) {
		holds := []time.Duration{0, time.Millisecond}
		for _, h := range holds {
			for _, wn := range waiters {
				ws = append(ws, Workload{Kind: Handoff, Clients: wn, Names: 1, Hold: h, Work: 2 * time.Millisecond,
					Duration: d(time.Second, 250*time.Millisecond)})
			}
		}
	}
	if want(Fairness) {
		ws = append(ws, Workload{Kind: Fairness, Clients: 16, Names: 1, Hold: time.Millisecond, Duration: d(2*time.Second, 400*time.Millisecond)})
	}
	if want(OpenLoop) {
		for _, l := range loads {
			ws = append(ws, Workload{Kind: OpenLoop, Clients: 4 * p, Names: names, Load: l, Duration: d(time.Second, 250*time.Millisecond)})
		}
	}
	if want(Semaphore) {
		// One target's time, split between dlock and its floor: 2.4 s
		// (6 rounds of 200 ms a side: about 200 grants a slice on the
		// slowest backends), 600 ms with -quick (3 rounds of 100 ms a
		// side).
		ws = append(ws, semaphoreWorkload(d(2400*time.Millisecond, 600*time.Millisecond)))
	}
	if want(Scale) {
		// One point: 450 ms (waiters), 300 ms with -quick; the leases
		// curve measures one refresh period (1 s) whatever the duration;
		// a names point ScaleNamesTime (10 rounds of 100 ms for dlock and
		// for its floor), ScaleNamesTimeQuick with -quick.
		ws = append(ws, scaleWorkloads(d(450*time.Millisecond, 300*time.Millisecond), d(ScaleNamesTime, ScaleNamesTimeQuick))...)
	}
	return ws
}

// ParseKinds parses a comma-separated list of workload kinds.
func ParseKinds(s string) ([]string, error) {
	if s == "" || s == "all" {
		return nil, nil
	}
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(Kinds, k) {
			return nil, fmt.Errorf("bench: unknown workload %q (want %s)", k, strings.Join(Kinds, ", "))
		}
		out = append(out, k)
	}
	return out, nil
}
