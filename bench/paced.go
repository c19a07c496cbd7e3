package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

// PacedSamples is how many timed operations a paced reference measures
// per round: the floor's releases, or the raw round trips, each after a
// pause of the hold. An odd count has a middle value.
const PacedSamples = 15

// pacedTimeout bounds one paced reference's measurement in one round.
const pacedTimeout = 30 * time.Second

// Paced is one reference of the handoff's ideal measured in the
// handoff's own conditions: a strategy floor's release, or the server's
// raw round trip, by one client that sleeps the hold before each timed
// operation, as a holder sleeps before it releases and a waiter has been
// idle before it is told. After a millisecond idle the server and the
// client wake cold: a Redis release takes about three times its
// tight-loop round trip then, so a gap taken from the uncontended
// workload's tight loop puts the ideal out of reach by construction.
// One Paced serves every configuration with its hold: the rows of the
// handoff and fairness configurations with that hold.
type Paced struct {
	// Backend is the floor or round-trip target's name, Kind its kind.
	Backend string `json:"backend"`
	Kind    string `json:"kind"`
	Server  string `json:"server,omitempty"`
	// HoldNs is the pause before each timed operation (0: none, the
	// tight figures).
	HoldNs int64 `json:"hold_ns"`
	// Rounds are the per-round p50s, measured in the round of the rows
	// with the same index (once per round, beside the first of the
	// round's configurations with the hold that ran).
	Rounds []PacedRound `json:"rounds"`
	// LastError is the last measurement that failed (its round is left
	// out).
	LastError string `json:"last_error,omitempty"`
}

// PacedRound is one round of a paced reference.
type PacedRound struct {
	Round int `json:"round"`
	// P50Ns is the p50 of the timed operations: the floor's release, or
	// one round trip.
	P50Ns   int64 `json:"p50_ns"`
	Samples int   `json:"samples"`
	// ElapsedNs is what measuring it took (the run's cost of it).
	ElapsedNs int64 `json:"elapsed_ns"`
	// Settle is the settling before its timed operations (Pacer.Quiet).
	Settle *SettleWait `json:"settle,omitempty"`
}

// p50 returns the reference's p50 in a round (none for a nil reference).
func (p *Paced) p50(round int) (int64, bool) {
	if p == nil {
		return 0, false
	}
	for _, r := range p.Rounds {
		if r.Round == round && r.P50Ns > 0 {
			return r.P50Ns, true
		}
	}
	return 0, false
}

// PacedTargets returns the references of the ideal of the rows of
// contenders: the floor and round-trip targets (among all) that they
// name, in the order of all.
func PacedTargets(contenders, all []Target) []Target {
	var out []Target
	for _, t := range all {
		if t.Kind != KindFloor && t.Kind != KindRTT {
			continue
		}
		if slices.ContainsFunc(contenders, func(c Target) bool {
			return c.Contends() && (c.Floor == t.Name || c.RTT == t.Name)
		}) {
			out = append(out, t)
		}
	}
	return out
}

// Pacer measures the paced references of a run (see Paced), one client
// per reference kept open over the run so that a round measures the
// operation, not a connection. Not safe for concurrent use.
type Pacer struct {
	prefix  string
	clients map[string]Client
	names   map[string]string // target → its lock name
	refs    []*Paced
	tried   map[pacedTry]bool
	// Quiet, if not nil, settles the other servers before each
	// reference's timed operations, as Runner.Quiet before the rows'
	// slices.
	Quiet *Quiet
}

// pacedTry is one reference's measurement in one round.
type pacedTry struct {
	name  string
	hold  time.Duration
	round int
}

// NewPacer returns a Pacer with no client open yet.
func NewPacer() *Pacer {
	return &Pacer{prefix: fmt.Sprintf("dlockbench-paced-%04x", rand.Uint32()&0xffff), clients: map[string]Client{},
		names: map[string]string{}, tried: map[pacedTry]bool{}}
}

// Measure measures, in round round, every reference of refs that this
// round has not measured with this hold yet, one after another in
// Rotation order: PacedSamples timed operations each, each after a sleep
// of hold. The configurations of a round that have the same hold share
// the figures: the round's references are measured once, beside the
// first of them (the rounds are paired, not the configurations; it
// halves the cost with -quick, quarters it in a full run). A reference
// that fails has its error in its Paced and no figure that round.
func (p *Pacer) Measure(ctx context.Context, refs []Target, hold time.Duration, round int) {
	for _, i := range Rotation(len(refs), round) {
		if ctx.Err() != nil {
			return
		}
		t := refs[i]
		try := pacedTry{t.Name, hold, round}
		if p.tried[try] {
			continue
		}
		p.tried[try] = true
		ref := p.ref(t, hold)
		t0 := time.Now()
		p50, settle, err := p.measure(ctx, t, hold)
		if err != nil {
			ref.LastError = fmt.Sprintf("round %d: %v", round+1, err)
			// Its client may be broken: the next round opens another.
			if c, ok := p.clients[t.Name]; ok {
				c.Close()
				delete(p.clients, t.Name)
			}
			continue
		}
		pr := PacedRound{Round: round, P50Ns: p50, Samples: PacedSamples, ElapsedNs: int64(time.Since(t0))}
		if settle.Settles > 0 {
			pr.Settle = &settle
		}
		ref.Rounds = append(ref.Rounds, pr)
	}
}

// References returns what the Pacer measured, one Paced per reference
// and hold.
func (p *Pacer) References() []*Paced { return p.refs }

// Close closes the Pacer's clients (a later Measure opens them again);
// what they measured stays.
func (p *Pacer) Close() error {
	var first error
	for _, c := range p.clients {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	clear(p.clients)
	return first
}

func (p *Pacer) ref(t Target, hold time.Duration) *Paced {
	for _, r := range p.refs {
		if r.HoldNs == int64(hold) && r.Backend == t.Name {
			return r
		}
	}
	r := &Paced{Backend: t.Name, Kind: t.Kind, Server: t.Server, HoldNs: int64(hold)}
	p.refs = append(p.refs, r)
	return r
}

// measure returns the p50 of PacedSamples timed operations of t (a
// floor's release, a round trip), each after a sleep of hold, and the
// settling before them.
func (p *Pacer) measure(ctx context.Context, t Target, hold time.Duration) (int64, SettleWait, error) {
	ctx, cancel := context.WithTimeout(ctx, pacedTimeout)
	defer cancel()
	name, ok := p.names[t.Name]
	if !ok {
		// A name of its own: no two references share a lock.
		name = fmt.Sprintf("%s-%d", p.prefix, len(p.names))
		p.names[t.Name] = name
	}
	c, err := p.client(ctx, t, name)
	if err != nil {
		return 0, SettleWait{}, err
	}
	settle := p.Quiet.Settle(ctx, t.Server)
	ns := make([]int64, 0, PacedSamples)
	for range PacedSamples {
		var d int64
		if t.Kind == KindRTT {
			// The round trip is the acquire; its release does nothing.
			testenv.Hold(hold)
			t0 := Now()
			if _, err := c.Acquire(ctx, name); err != nil {
				return 0, settle, err
			}
			d = Now() - t0
		} else {
			h, err := c.Acquire(ctx, name)
			if err != nil {
				return 0, settle, err
			}
			testenv.Hold(hold)
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			t0 := Now()
			err = h.Release(rctx)
			d = Now() - t0
			rcancel()
			if err != nil {
				return 0, settle, fmt.Errorf("release: %w", err)
			}
		}
		ns = append(ns, d)
	}
	slices.Sort(ns)
	return ns[len(ns)/2], settle, nil
}

// client returns t's open client, opening it (and warming it with one
// untimed operation on name) the first time.
func (p *Pacer) client(ctx context.Context, t Target, name string) (Client, error) {
	if c, ok := p.clients[t.Name]; ok {
		return c, nil
	}
	c, err := Open(ctx, t)
	if err != nil {
		return nil, err
	}
	h, err := c.Acquire(ctx, name)
	if err == nil {
		err = h.Release(ctx)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	p.clients[t.Name] = c
	return c, nil
}
