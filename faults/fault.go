package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Hooks are the server-side operations behind a Target. A nil field means
// the target cannot take the faults that need it.
type Hooks struct {
	// Servers is the number of servers (Redlock nodes, ensemble members).
	Servers int
	// Restart kills server i with SIGKILL and starts it again with its
	// data directory (i < 0: every server).
	Restart func(ctx context.Context, i int) error
	// Leader returns the index of the ensemble's current leader.
	Leader func(ctx context.Context) (int, error)
	// Freeze stops server i (SIGSTOP) for d, then continues it (SIGCONT):
	// to its peers and its clients it is a member cut off by a partition
	// that heals, with the state it had when it was cut.
	Freeze func(ctx context.Context, i int, d time.Duration) error
	// Failover starts a replica of the current primary, promotes it before
	// the latest writes replicated, and switches every client to it.
	Failover func(ctx context.Context, x *Injection) error
	// Evict makes the server evict keys under maxmemory (filling it with
	// junk) and then undoes the memory limit.
	Evict func(ctx context.Context, x *Injection) error
	// ExpireEarly makes the lock key of name expire now on server i, as a
	// clock jump on that node would.
	ExpireEarly func(ctx context.Context, i int, name string) error
	// RestartReusingIDs kills and restarts the server (as Restart), then
	// opens sessions of its own until it holds one with every session id
	// the server's clients had before the restart (a MySQL server hands
	// connection ids out again from 1). The returned Bystanders stand for
	// the other clients that a restart gives those ids to.
	RestartReusingIDs func(ctx context.Context) (Bystanders, error)
}

// Bystanders are sessions opened after a restart with the ids that
// sessions of before it had.
type Bystanders interface {
	// IDs returns the reused session ids.
	IDs() []int64
	// Ended returns the ids of the sessions that something ended since
	// they were opened.
	Ended(ctx context.Context) ([]int64, error)
	// Close closes the sessions.
	Close() error
}

// Fault is one kind of fault, injected on a schedule during a run.
type Fault struct {
	// Name is the column of the report.
	Name string
	// Doc says what is done.
	Doc string
	// Applies reports whether the fault can run against t.
	Applies func(t *Target) bool
	// Inject injects the fault once; it may block while the fault lasts.
	Inject func(ctx context.Context, x *Injection) error
	// Unsafe: the backend is documented not to survive this fault (a
	// double grant is expected, which is why fencing exists). Raw
	// overlaps and unsignalled losses are reported, not asserted.
	Unsafe bool
}

// Expected says whether a run of f against caps must have every lost lease
// signalled before the regrant, and why not when it need not.
func (f *Fault) Expected(caps driver.Capabilities) (signalled bool, why string) {
	switch {
	case f.Unsafe:
		return false, "documented unsafe: the server forgets the grant"
	case (f.Name == "pause" || f.Name == "mixed") && caps.SessionBound:
		return false, "a paused holder cannot see its session expire; the fencing token protects the resource"
	case (f.Name == "restart" || f.Name == "restart-ids" || f.Name == "mixed") && caps.ReleaseOnCrash == 0:
		// A connection lock (SQL forupdate, advisory, getlock) is freed
		// the moment the server dies, and a server that restarts fast can
		// grant it again before the holder's next keep-alive meets the
		// broken connection. Nothing on the client can see that sooner.
		return false, "a connection lock dies with the server; its holder learns at its next keep-alive (within TTL/3), and the fencing token protects the resource"
	}
	return true, ""
}

// crashBound is how long after its holder died a lock may stay taken, by
// the backend's own statement, for a run with lease TTL ttl.
func crashBound(caps driver.Capabilities, ttl time.Duration) time.Duration {
	switch b := caps.ReleaseOnCrash; {
	case b == driver.ReleaseAfterTTL:
		return ttl
	case b < 0:
		return ttl
	default:
		return b
	}
}

// pauseLength is how long a holder is paused: past its TTL and past the
// backend's crash bound, so that the server gives the lock away.
func pauseLength(x *Injection) time.Duration { return pauseLengthFor(x.Target().Caps, x.TTL()) }

func pauseLengthFor(caps driver.Capabilities, ttl time.Duration) time.Duration {
	return max(2*ttl, crashBound(caps, ttl)+ttl)
}

var errNoHolder = errors.New("faults: nobody held the lock")

func holder(ctx context.Context, x *Injection) (int, error) {
	id := x.Holder(ctx, 3*x.TTL())
	if id == 0 {
		return 0, errNoHolder
	}
	return id, nil
}

func always(*Target) bool { return true }

// Catalogue returns every fault, in the order runs use them. Faults that
// change the topology for good (failover) come last.
func Catalogue() []*Fault {
	return []*Fault{
		{
			Name:    "none",
			Doc:     "no fault: the baseline",
			Applies: always,
		},
		{
			Name:    "pause",
			Doc:     "the holder is paused (SIGSTOP) past its TTL and the backend's crash bound, then continued (SIGCONT)",
			Applies: always,
			Inject:  onHolder(pauseHolder),
		},
		{
			Name:    "kill",
			Doc:     "the holder is killed (SIGKILL); a new client process replaces it",
			Applies: always,
			Inject:  onHolder(killHolder),
		},
		{
			Name:    "partition",
			Doc:     "the holder is cut off from every server through its proxy, alternately silently (bytes dropped both ways, connections closed at the end) and by resets (RST as soon as it speaks), past its TTL and the backend's crash bound",
			Applies: always,
			Inject:  onHolder(cutHolder),
		},
		{
			Name:    "latency",
			Doc:     "the holder's replies are delayed by half its TTL for twice its TTL",
			Applies: always,
			Inject:  onHolder(slowHolder),
		},
		{
			Name:    "lost-reply",
			Doc:     "the replies to the next acquire are dropped (the proxy drops server-to-client bytes from just before the request) and its connections closed: the server acted, the client never heard",
			Applies: always,
			Inject: func(ctx context.Context, x *Injection) error {
				x.LoseNextReply()
				return nil
			},
		},
		{
			Name:    "restart",
			Doc:     "a server is killed (SIGKILL) and restarted with its data; for ensembles and Redlock a follower or one node",
			Applies: func(t *Target) bool { return t.Hooks.Restart != nil },
			Inject:  restartFollower,
		},
		{
			Name:    "leader",
			Doc:     "the ensemble's leader is killed (SIGKILL) and restarted",
			Applies: func(t *Target) bool { return t.Hooks.Restart != nil && t.Hooks.Leader != nil },
			Inject:  restartLeader,
		},
		{
			Name:    "restart-all",
			Doc:     "every server is killed (SIGKILL) at once and all are restarted with their data: a whole cluster or ensemble down and back (a power cut); tokens must go on increasing",
			Applies: func(t *Target) bool { return t.Hooks.Restart != nil && t.Hooks.Servers > 1 },
			Inject: func(ctx context.Context, x *Injection) error {
				return restartServer(ctx, x, "restart-all", -1, "every server killed")
			},
		},
		{
			Name:    "isolate-leader",
			Doc:     "the ensemble's leader is frozen (SIGSTOP) past the lease TTL and the backend's crash bound, as a partition that cuts that member off from its peers and its clients would, then continued (SIGCONT) with the state it had: the others elect a new leader, clients on the frozen member must move, and nothing the old leader says when it returns may grant a second holder",
			Applies: func(t *Target) bool { return t.Hooks.Freeze != nil && t.Hooks.Leader != nil && t.Hooks.Servers > 2 },
			Inject:  isolateLeader,
		},
		{
			Name:    "early-expiry",
			Doc:     "the lock key expires early (PEXPIRE 1: a clock jump) on one node; the quorum absorbs it unless the holder had only a bare quorum (a node was busy with a contender when it acquired), and then two clients hold the lock",
			Applies: func(t *Target) bool { return t.Hooks.ExpireEarly != nil },
			Inject:  func(ctx context.Context, x *Injection) error { return expireOn(ctx, x, "early-expiry", 1) },
			// A clock jump breaks Redlock's own assumption of bounded
			// drift (its Capabilities say so).
			Unsafe: true,
		},
		{
			Name:    "early-expiry-majority",
			Doc:     "the lock key expires early on a majority of nodes at once (clock jumps on most nodes), which Redlock does not survive",
			Applies: func(t *Target) bool { return t.Hooks.ExpireEarly != nil && t.Hooks.Servers > 1 },
			Inject: func(ctx context.Context, x *Injection) error {
				return expireOn(ctx, x, "early-expiry-majority", x.Target().Hooks.Servers/2+1)
			},
			Unsafe: true,
		},
		{
			Name:    "restart-ids",
			Doc:     "the holder is paused (SIGSTOP); the server is killed and restarted, and sessions of other clients take every session id the clients had before; the holder continues (SIGCONT) and finds its connection gone: its clean-up must end none of those sessions (a KILL by a stale id would end another client's session and free its lock)",
			Applies: func(t *Target) bool { return t.Hooks.RestartReusingIDs != nil },
			Inject:  restartReusingIDs,
		},
		mixed(),
		{
			Name:    "evict",
			Doc:     "the server is filled with junk keys beyond a maxmemory limit under the volatile-ttl policy, so the lock key (the volatile key closest to expiry) is evicted while its holder still holds it; the fence counter (no TTL) stays",
			Applies: func(t *Target) bool { return t.Hooks.Evict != nil },
			Inject:  func(ctx context.Context, x *Injection) error { return x.Target().Hooks.Evict(ctx, x) },
			Unsafe:  true,
		},
		{
			Name:    "failover",
			Doc:     "a replica is promoted (REPLICAOF NO ONE) before the latest grant replicated and every client is switched to it",
			Applies: func(t *Target) bool { return t.Hooks.Failover != nil },
			Inject:  func(ctx context.Context, x *Injection) error { return x.Target().Hooks.Failover(ctx, x) },
			Unsafe:  true,
		},
	}
}

// onHolder is a fault injected on the client that holds the lock, once
// one does.
func onHolder(inject func(ctx context.Context, x *Injection, id int) error) func(ctx context.Context, x *Injection) error {
	return func(ctx context.Context, x *Injection) error {
		id, err := holder(ctx, x)
		if err != nil {
			return err
		}
		return inject(ctx, x, id)
	}
}

func pauseHolder(ctx context.Context, x *Injection, id int) error {
	return x.Pause(ctx, id, pauseLength(x), "pause")
}

func killHolder(_ context.Context, x *Injection, id int) error { return x.Kill(id, "kill") }

// cutHolder cuts the holder off silently and by resets, in turn.
func cutHolder(ctx context.Context, x *Injection, id int) error {
	mode := CutSilent
	if x.next()%2 == 1 {
		mode = CutReset
	}
	return x.Cut(ctx, id, mode, -1, pauseLength(x), "partition")
}

func slowHolder(ctx context.Context, x *Injection, id int) error {
	return x.Latency(ctx, id, x.TTL()/2, 2*x.TTL(), "latency")
}

// restartFollower restarts a server: the only one, or one in turn of an
// ensemble's or Redlock's, never the ensemble's leader.
func restartFollower(ctx context.Context, x *Injection) error {
	h := x.Target().Hooks
	i := 0
	if h.Servers > 1 {
		i = x.next() % h.Servers
		if h.Leader != nil {
			if l, err := h.Leader(ctx); err == nil && i == l {
				i = (i + 1) % h.Servers
			}
		}
	}
	return restartServer(ctx, x, "restart", i, fmt.Sprintf("server %d killed", i))
}

func restartLeader(ctx context.Context, x *Injection) error {
	l, err := x.Target().Hooks.Leader(ctx)
	if err != nil {
		return err
	}
	return restartServer(ctx, x, "leader", l, fmt.Sprintf("leader (server %d) killed", l))
}

// isolateLeader freezes the current leader for a pause's length.
func isolateLeader(ctx context.Context, x *Injection) error {
	h := x.Target().Hooks
	l, err := h.Leader(ctx)
	if err != nil {
		return err
	}
	d := pauseLength(x)
	x.Note("isolate-leader", fmt.Sprintf("leader (server %d) frozen for %v", l, d))
	if err := h.Freeze(ctx, l, d); err != nil {
		return err
	}
	x.Note("isolate-leader", fmt.Sprintf("server %d continued", l))
	return nil
}

// restartServer restarts server i, noting killed when it goes down.
func restartServer(ctx context.Context, x *Injection, fault string, i int, killed string) error {
	x.Note(fault, killed)
	if err := x.Target().Hooks.Restart(ctx, i); err != nil {
		return err
	}
	up := fmt.Sprintf("server %d up", i)
	if i < 0 {
		up = "every server up"
	}
	x.Note(fault, up)
	return nil
}

// restartReusingIDs is the restart-ids fault: a stale holder wakes up on a
// restarted server whose session ids now belong to others.
func restartReusingIDs(ctx context.Context, x *Injection) error {
	id, err := holder(ctx, x)
	if err != nil {
		return err
	}
	h := x.Target().Hooks
	var by Bystanders
	err = x.PauseDuring(ctx, id, "SIGSTOP, server restarted", "restart-ids", func(ctx context.Context) error {
		var err error
		by, err = h.RestartReusingIDs(ctx)
		if err != nil {
			return err
		}
		x.Note("restart-ids", fmt.Sprintf("server up; its clients' old session ids %v now belong to other sessions", by.IDs()))
		return nil
	})
	if err != nil {
		return err
	}
	defer by.Close()
	// The holder's keep-alive runs within TTL/3 of SIGCONT, finds its
	// connection gone and cleans up: give it that and the clean-up's bound.
	// The check outlives the run's ctx (the clients are stopped only once
	// the injection returns): cut short, it read every bystander as ended.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.TTL()+2*time.Second+time.Minute)
	defer cancel()
	sleep(cctx, x.TTL()+2*time.Second)
	ended, err := by.Ended(cctx)
	if err != nil {
		return err
	}
	if len(ended) > 0 {
		x.Violation("restart-ids", fmt.Sprintf("sessions %v, opened after the restart with ids that clients had before it, were ended by a stale holder's clean-up", ended))
	} else {
		x.Note("restart-ids", "no session with a reused id was ended")
	}
	return nil
}

// expireOn makes the lock key expire now on k nodes chosen at random.
func expireOn(ctx context.Context, x *Injection, fault string, k int) error {
	h := x.Target().Hooks
	n := max(h.Servers, 1)
	first := rand.N(n)
	var nodes []int
	for j := range min(k, n) {
		i := (first + j) % n
		nodes = append(nodes, i)
		if err := h.ExpireEarly(ctx, i, x.Name()); err != nil {
			return err
		}
	}
	x.Note(fault, fmt.Sprintf("lock key expired on node(s) %v of %d", nodes, n))
	return nil
}

// mixed is the fault that injects, each time, one of the catalogue's
// faults that the backend is expected to survive, chosen at random.
func mixed() *Fault {
	return &Fault{
		Name:    "mixed",
		Doc:     "each injection is one of pause, kill, partition, latency, lost-reply, restart, leader (those that apply), at random",
		Applies: always,
		Inject: func(ctx context.Context, x *Injection) error {
			var fs []*Fault
			for _, f := range Catalogue() {
				if f.Inject != nil && !f.Unsafe && f.Name != "mixed" && f.Applies(x.Target()) {
					fs = append(fs, f)
				}
			}
			if len(fs) == 0 {
				return nil
			}
			return fs[rand.N(len(fs))].Inject(ctx, x)
		},
	}
}

// FaultByName returns the catalogue's fault called name, or nil.
func FaultByName(name string) *Fault {
	for _, f := range Catalogue() {
		if f.Name == name {
			return f
		}
	}
	return nil
}
