package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/childproc"
)

// Target is a running backend that a run's clients use.
type Target struct {
	// Backend names the row of the report: "redis", "postgres/forupdate".
	Backend string
	// URL is what each client opens, with every address of Upstreams
	// replaced by the address of that client's own proxy.
	URL string
	// Upstreams are the server addresses ("host:port") that appear in URL.
	Upstreams []string
	// Caps are the backend's capabilities.
	Caps driver.Capabilities
	// Hooks gives faults access to the servers behind the target.
	Hooks Hooks
}

// Config is one run: Clients client processes looping on one lock name
// for Duration, while Fault is injected every Every (first after Every/2).
type Config struct {
	Target  *Target
	Fault   *Fault
	Clients int
	// TTL of every lease (keep-alive on, as applications use it).
	TTL time.Duration
	// Duration of the run, and the interval between injections.
	Duration, Every time.Duration
	// Name is the lock name.
	Name string
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
	// Dir receives porcupine's visualisation of a failing history
	// ("": the temporary directory).
	Dir string
	// CheckTimeout bounds the linearizability search (default 30s).
	CheckTimeout time.Duration
	// Permits, when above zero (at most MaxPermits), makes the clients take permits of a
	// semaphore of that many permits named Name instead of the lock
	// (at most conformance.MaxModelPermits): the checks are then the
	// fenced semaphore's (never more than Permits holders).
	Permits int
}

func (c *Config) checkTimeout() time.Duration {
	if c.CheckTimeout <= 0 {
		return 30 * time.Second
	}
	return c.CheckTimeout
}

func (c *Config) acquireTimeout() time.Duration { return max(2*time.Second, 4*c.TTL) }

// client is one client process and its proxies.
type client struct {
	id   int
	proc *childproc.Child
	px   *Proxies

	// guarded by run.mu
	pending map[string]int // op -> index in hist.Ops of its open call
	leases  map[int]*LeaseRec
	cur     *LeaseRec // the lease it holds, nil when none
	paused  bool
	dead    bool
}

// run is the parent side of one run.
type run struct {
	cfg  Config
	t0   time.Time
	reg  conformance.Register
	sreg *conformance.SemRegister // the register of a semaphore run
	stop chan struct{}            // closed at the end of the run

	mu        sync.Mutex
	hist      History
	clients   map[int]*client
	nextID    int
	upstreams []string // where the proxies point now (a failover changes it)
	loseReply int      // pending lost-reply injections
	injected  int      // injections so far (faults alternate on it)
	stopping  bool
	wg        sync.WaitGroup
}

func (r *run) now() int64 { return int64(time.Since(r.t0)) }

func (r *run) logf(format string, args ...any) {
	if r.cfg.Logf != nil {
		r.cfg.Logf(format, args...)
	}
}

// Run runs one configuration and returns its history and checks.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Clients <= 0 {
		cfg.Clients = 5
	}
	if cfg.TTL <= 0 {
		cfg.TTL = time.Second
	}
	if cfg.Every <= 0 {
		cfg.Every = 2 * time.Second
	}
	if cfg.Fault != nil {
		// Long enough for one injection to heal and its recovery to show.
		caps := cfg.Target.Caps
		cfg.Duration = max(cfg.Duration, cfg.Every/2+pauseLengthFor(caps, cfg.TTL)+
			crashBound(caps, cfg.TTL)+slack(cfg.TTL)+cfg.TTL)
	}
	if cfg.Permits > conformance.MaxModelPermits {
		return nil, fmt.Errorf("faults: %d permits: the checker models at most %d", cfg.Permits, conformance.MaxModelPermits)
	}
	r := &run{
		cfg:       cfg,
		t0:        time.Now(),
		stop:      make(chan struct{}),
		clients:   make(map[int]*client),
		upstreams: append([]string(nil), cfg.Target.Upstreams...),
	}
	if cfg.Permits > 0 {
		r.sreg = conformance.NewSemRegister(cfg.Permits)
	}
	for range cfg.Clients {
		if err := r.spawn(); err != nil {
			r.shutdown()
			return nil, err
		}
	}
	fctx, cancel := context.WithCancel(ctx)
	var fwg sync.WaitGroup
	if cfg.Fault != nil && cfg.Fault.Inject != nil {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			r.schedule(fctx)
		}()
	}
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	cancel()
	fwg.Wait()
	r.shutdown()
	res := analyse(&r.hist, cfg)
	return res, ctx.Err()
}

// schedule injects the fault every cfg.Every, starting after Every/2.
func (r *run) schedule(ctx context.Context) {
	wait := r.cfg.Every / 2
	// Stop injecting early enough for the last fault to heal and its
	// recovery to be seen within the run.
	caps := r.cfg.Target.Caps
	last := r.cfg.Duration - 2*pauseLengthFor(caps, r.cfg.TTL) - slack(r.cfg.TTL)
	for {
		if time.Since(r.t0)+wait > last && r.injections() > 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		start := time.Now()
		err := r.cfg.Fault.Inject(ctx, &Injection{r: r})
		r.mu.Lock()
		if err == nil {
			r.hist.Injections++
		} else if ctx.Err() == nil {
			r.hist.InjectErrors = append(r.hist.InjectErrors, err.Error())
		}
		r.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			r.logf("%s/%s: inject: %v", r.cfg.Target.Backend, r.cfg.Fault.Name, err)
		}
		wait = max(r.cfg.Every-time.Since(start), r.cfg.Every/4)
	}
}

func (r *run) injections() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hist.Injections
}

func (r *run) event(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.At == 0 {
		e.At = r.now()
	}
	r.hist.Events = append(r.hist.Events, e)
}

// spawn starts one more client process.
func (r *run) spawn() error {
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	ups := append([]string(nil), r.upstreams...)
	r.mu.Unlock()

	px, err := NewProxies(fmt.Sprintf("%s-%d", r.cfg.Name, id), ups)
	if err != nil {
		return err
	}
	proc, err := childproc.Start(childproc.Spec{
		Name:    fmt.Sprintf("client %d", id),
		RoleEnv: envChild, Role: strconv.Itoa(id),
		Env: []string{
			envURL + "=" + px.Rewrite(r.cfg.Target.URL, r.cfg.Target.Upstreams),
			envName + "=" + r.cfg.Name,
			envTTL + "=" + r.cfg.TTL.String(),
			envTimeout + "=" + r.cfg.acquireTimeout().String(),
			envPermits + "=" + strconv.Itoa(r.cfg.Permits),
		},
		OutputMax:     4096,
		DieWithParent: true,
	})
	if err != nil {
		px.Close()
		return fmt.Errorf("faults: start client: %w", err)
	}
	c := &client{
		id: id, proc: proc, px: px,
		pending: make(map[string]int),
		leases:  make(map[int]*LeaseRec),
	}
	r.mu.Lock()
	r.clients[id] = c
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.serve(c)
		var exit *exec.ExitError
		if err := proc.Wait(0); errors.As(err, &exit) && exit.Exited() {
			r.logf("%s/%s: client %d exited: %v: %s", r.cfg.Target.Backend, r.faultName(), id, err, proc.Output())
		}
		r.exited(c)
		px.Close()
		proc.Close()
	}()
	return nil
}

// serve reads a client's lines until it ends.
func (r *run) serve(c *client) {
	for {
		line, err := c.proc.Next(0)
		if err != nil {
			return
		}
		var m msg
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			continue
		}
		now := r.now()
		switch m.K {
		case "call":
			r.call(c, m, now)
		case "ret":
			r.ret(c, m, now)
		case "write":
			ok := r.write(c, m, now)
			r.reply(c, msg{K: "wr", OK: ok})
		case "done":
			r.done(c, m, now)
		}
	}
}

func (r *run) reply(c *client, m msg) {
	_ = c.proc.SendJSON(m) // a dead client's pipe fails; nothing to do
}

func (r *run) call(c *client, m msg, now int64) {
	r.mu.Lock()
	if m.Op == "open" || (m.Op == "acquire" && r.stopping) {
		stop := r.stopping
		r.mu.Unlock()
		if stop {
			r.reply(c, msg{K: "stop"})
		} else {
			r.reply(c, msg{K: "go"})
		}
		return
	}
	r.hist.Ops = append(r.hist.Ops, Op{Client: c.id, Kind: m.Op, Lease: m.Lease, Call: now, Return: -1})
	c.pending[m.Op] = len(r.hist.Ops) - 1
	if m.Op == "release" {
		if l := c.leases[m.Lease]; l != nil {
			l.relCall = now
			if l.End < 0 {
				l.End, l.EndHow = now, "released"
			}
		}
		if c.cur != nil && c.cur.Seq == m.Lease {
			c.cur = nil
		}
	}
	lose := false
	if m.Op == "acquire" && r.loseReply > 0 {
		r.loseReply--
		lose = true
	}
	r.mu.Unlock()
	if lose {
		// Lose the reply of the request this client is about to make.
		if err := c.px.LoseReplies(r.cfg.lostReplyAfter()); err == nil {
			r.event(Event{Fault: "lost-reply", Client: c.id, Detail: "the replies of its next acquire are dropped"})
		}
	}
	r.reply(c, msg{K: "go"})
}

func (c *Config) lostReplyAfter() time.Duration { return max(200*time.Millisecond, c.TTL/2) }

func (r *run) ret(c *client, m msg, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := c.pending[m.Op]
	if !ok {
		return
	}
	delete(c.pending, m.Op)
	op := &r.hist.Ops[i]
	op.Return, op.OK, op.Token, op.Err, op.ErrKind = now, m.OK, m.Token, m.Err, m.Kind
	switch {
	case m.Op == "acquire" && m.OK:
		op.Lease = m.Lease
		l := &LeaseRec{
			Client: c.id, Seq: m.Lease, Token: m.Token, Called: op.Call, Granted: now,
			callHi: now - m.AtNS, End: -1, EndHow: "open",
			Signalled: -1, DoneAt: -1, Deadline: -1, relCall: -1,
		}
		if l.callHi < op.Call {
			l.callHi = op.Call
		}
		c.leases[m.Lease] = l
		c.cur = l
		r.hist.Leases = append(r.hist.Leases, l)
	case m.Op == "release":
		if l := c.leases[m.Lease]; l != nil {
			l.ReleaseKind = m.Kind
		}
	}
}

func (r *run) write(c *client, m msg, now int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ok bool
	if r.sreg != nil {
		ok = r.sreg.Write(m.Token) == nil
	} else {
		ok = r.reg.Write(m.Token, c.id) == nil
	}
	r.hist.Ops = append(r.hist.Ops, Op{Client: c.id, Kind: "write", Lease: m.Lease, Call: now, Return: now, OK: ok, Token: m.Token})
	return ok
}

func (r *run) done(c *client, m msg, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := c.leases[m.Lease]
	if l == nil {
		return
	}
	l.DoneAt = min(now, l.callHi+m.DoneNS)
	if m.DeadlineNS >= 0 {
		l.Deadline = l.callHi + m.DeadlineNS
	}
	l.DoneKind, l.DoneErr = m.Kind, m.Err
	if m.Kind == kindLost {
		sig := l.DoneAt
		if l.Deadline >= 0 && l.Deadline < sig {
			sig = l.Deadline
		}
		if l.End < 0 || sig < l.End {
			l.End, l.EndHow = sig, "lost"
		}
	}
	if c.cur == l {
		c.cur = nil
	}
}

// exited is called when a client process has ended.
func (r *run) exited(c *client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.dead = true
	c.cur = nil
	delete(r.clients, c.id)
}

// shutdown ends the run: every client process is killed (a holder's
// lock is left to expire: each run uses its own lock name), and the
// history closed.
func (r *run) shutdown() {
	r.mu.Lock()
	r.stopping = true
	r.hist.End = r.now()
	var cs []*client
	for _, c := range r.clients {
		cs = append(cs, c)
	}
	r.mu.Unlock()
	close(r.stop)
	for _, c := range cs {
		_ = c.proc.Kill()
	}
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	sort.SliceStable(r.hist.Ops, func(i, j int) bool { return r.hist.Ops[i].Call < r.hist.Ops[j].Call })
}

func (r *run) faultName() string {
	if r.cfg.Fault == nil {
		return "none"
	}
	return r.cfg.Fault.Name
}

// Injection is what a fault sees of the run it is injected into.
type Injection struct{ r *run }

// Target returns the backend under test.
func (x *Injection) Target() *Target { return x.r.cfg.Target }

// TTL returns the lease TTL of the run.
func (x *Injection) TTL() time.Duration { return x.r.cfg.TTL }

// Holder waits until some client that is neither paused nor dead holds the
// lock and returns its id, or 0 when none did before ctx ended or wait
// passed.
func (x *Injection) Holder(ctx context.Context, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		x.r.mu.Lock()
		var ids []int
		for id, c := range x.r.clients {
			if c.cur != nil && !c.paused && !c.dead {
				ids = append(ids, id)
			}
		}
		x.r.mu.Unlock()
		if len(ids) > 0 {
			return ids[rand.N(len(ids))]
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0
}

// Client returns a live client at random (0 when none).
func (x *Injection) Client() int {
	x.r.mu.Lock()
	defer x.r.mu.Unlock()
	var ids []int
	for id, c := range x.r.clients {
		if !c.dead && !c.paused {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0
	}
	sort.Ints(ids)
	return ids[rand.N(len(ids))]
}

func (x *Injection) client(id int) (*client, error) {
	x.r.mu.Lock()
	defer x.r.mu.Unlock()
	c := x.r.clients[id]
	if c == nil || c.dead {
		return nil, fmt.Errorf("faults: client %d is gone", id)
	}
	return c, nil
}

// holderEvent records e with the client's current lease as its victim.
func (x *Injection) holderEvent(c *client, e Event, recover bool) {
	r := x.r
	r.mu.Lock()
	defer r.mu.Unlock()
	e.At, e.Client, e.victim, e.recover = r.now(), c.id, c.cur, recover && c.cur != nil
	r.hist.Events = append(r.hist.Events, e)
}

// Kill SIGKILLs client id, and starts a replacement so the number of
// clients stays the same.
func (x *Injection) Kill(id int, fault string) error {
	c, err := x.client(id)
	if err != nil {
		return err
	}
	x.holderEvent(c, Event{Fault: fault, Detail: "SIGKILL"}, true)
	x.r.mu.Lock()
	now := x.r.now()
	for _, l := range c.leases {
		if l.End < 0 {
			l.End, l.EndHow = now, "killed"
		}
	}
	c.cur = nil
	x.r.mu.Unlock()
	if err := c.proc.Kill(); err != nil {
		return fmt.Errorf("faults: kill client %d: %w", id, err)
	}
	return x.r.spawn()
}

// Pause SIGSTOPs client id for d, then SIGCONTs it.
func (x *Injection) Pause(ctx context.Context, id int, d time.Duration, fault string) error {
	return x.PauseDuring(ctx, id, fmt.Sprintf("SIGSTOP for %v", d), fault, func(ctx context.Context) error {
		sleep(ctx, d)
		return nil
	})
}

// PauseDuring SIGSTOPs client id, runs during (the world changes while the
// client cannot see it), then SIGCONTs the client, whatever during returned.
func (x *Injection) PauseDuring(ctx context.Context, id int, detail, fault string, during func(ctx context.Context) error) error {
	c, err := x.client(id)
	if err != nil {
		return err
	}
	x.holderEvent(c, Event{Fault: fault, Detail: detail}, true)
	if err := c.proc.Stop(); err != nil {
		return fmt.Errorf("faults: stop client %d: %w", id, err)
	}
	x.r.mu.Lock()
	c.paused = true
	x.r.mu.Unlock()
	derr := during(ctx)
	x.r.mu.Lock()
	c.paused = false
	x.r.mu.Unlock()
	x.r.event(Event{Fault: fault, Client: id, Detail: "SIGCONT"})
	if err := c.proc.Cont(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return errors.Join(derr, fmt.Errorf("faults: continue client %d: %w", id, err))
	}
	return derr
}

// Cut cuts client id off (from server only, or from all when only < 0)
// for d.
func (x *Injection) Cut(ctx context.Context, id int, mode CutMode, only int, d time.Duration, fault string) error {
	c, err := x.client(id)
	if err != nil {
		return err
	}
	heal, err := c.px.Cut(mode, only)
	if err != nil {
		return err
	}
	x.holderEvent(c, Event{Fault: fault, Detail: fmt.Sprintf("cut (%s) for %v", mode, d)}, false)
	sleep(ctx, d)
	heal()
	x.r.event(Event{Fault: fault, Client: id, Detail: "healed"})
	return nil
}

// Latency delays every reply to client id by lat for d.
func (x *Injection) Latency(ctx context.Context, id int, lat time.Duration, d time.Duration, fault string) error {
	c, err := x.client(id)
	if err != nil {
		return err
	}
	heal, err := c.px.Latency(lat, lat/4)
	if err != nil {
		return err
	}
	x.holderEvent(c, Event{Fault: fault, Detail: fmt.Sprintf("latency %v for %v", lat, d)}, false)
	sleep(ctx, d)
	heal()
	return nil
}

// LoseNextReply makes the next acquire call by any client lose its replies.
func (x *Injection) LoseNextReply() {
	x.r.mu.Lock()
	x.r.loseReply++
	x.r.mu.Unlock()
}

// Redirect points every client's proxy for upstream i (and those of
// clients started later) at addr.
func (x *Injection) Redirect(i int, addr string, fault string) error {
	x.r.mu.Lock()
	x.r.upstreams[i] = addr
	var cs []*client
	for _, c := range x.r.clients {
		cs = append(cs, c)
	}
	x.r.mu.Unlock()
	x.r.event(Event{Fault: fault, Detail: "clients switched to " + addr})
	var errs []error
	for _, c := range cs {
		if err := c.px.Redirect(i, addr); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitGrant waits until some client is granted the lock after now, for
// at most d.
func (x *Injection) waitGrant(ctx context.Context, d time.Duration) bool {
	r := x.r
	r.mu.Lock()
	from := r.now()
	r.mu.Unlock()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		r.mu.Lock()
		n := len(r.hist.Leases)
		got := n > 0 && r.hist.Leases[n-1].Granted > from
		r.mu.Unlock()
		if got {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// next counts injections; faults alternate their variants on it.
func (x *Injection) next() int {
	x.r.mu.Lock()
	defer x.r.mu.Unlock()
	x.r.injected++
	return x.r.injected - 1
}

// Name returns the lock name of the run.
func (x *Injection) Name() string { return x.r.cfg.Name }

// Note records a fault event.
func (x *Injection) Note(fault, detail string) { x.r.event(Event{Fault: fault, Detail: detail}) }

// Violation records a broken promise that the fault observed itself (not
// one the history's analysis can find): the run fails with detail.
func (x *Injection) Violation(fault, detail string) {
	x.r.event(Event{Fault: fault, Detail: detail, Violation: true})
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
