package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// OpenRedlock returns a Locker that runs Redlock over independent Redis
// masters (3 or 5, not replicas of each other): a lock is held when a
// quorum of len(clients)/2+1 nodes granted it within its validity. Closing
// the Locker does not close the clients.
//
// OpenRedlock returns an error wrapping dlock.ErrInvalidOption if clients
// is empty or holds a nil client, or opts.Prefix contains '{' or '}'.
func OpenRedlock(clients []goredis.UniversalClient, opts *Options) (*dlock.Locker, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("redis: OpenRedlock needs at least one client: %w", dlock.ErrInvalidOption)
	}
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("redis: OpenRedlock needs non-nil clients (client %d is nil): %w", i, dlock.ErrInvalidOption)
		}
	}
	if err := validPrefix(opts.prefix()); err != nil {
		return nil, err
	}
	return dlock.NewLockerWith(newRedlock(clients, false, opts.prefix(), opts.nodeTimeout()), &dlock.Options{Observer: opts.observer()}), nil
}

// redlock is the driver for Redlock over independent masters.
type redlock struct {
	nodes       []goredis.UniversalClient
	owned       bool
	prefix      string
	quorum      int
	nodeTimeout time.Duration
	hub         *hub
	names       *nameCache
	values      *grantValues
	ttl         ttlArg
	gate        evictionGate
	clog        *driver.ClientLog // the clients' dial failures (opened from a URL), or nil
	crew        *crew             // runs the calls to the nodes
	refresher   *refresher        // batches the leases' refreshes
}

var (
	_ driver.Locker    = (*redlock)(nil)
	_ driver.Watcher   = (*redlock)(nil)
	_ driver.Inspector = (*redlock)(nil)
)

func newRedlock(nodes []goredis.UniversalClient, owned bool, prefix string, nodeTimeout time.Duration) *redlock {
	r := &redlock{
		nodes:       nodes,
		owned:       owned,
		prefix:      prefix,
		quorum:      len(nodes)/2 + 1,
		nodeTimeout: nodeTimeout,
		values:      newGrantValues(),
		crew:        newCrew(crewKeep(nodes)),
		refresher:   newRefresher(nodes, nodeTimeout),
	}
	// A waiter subscribes on every node: a release publishes on every node
	// it deletes from, so wake-ups survive the loss of a minority. The
	// hub drops the duplicates by the grant id they carry.
	all := make([]string, len(nodes))
	for i := range nodes {
		all[i] = strconv.Itoa(i)
	}
	r.hub = newHub(
		func(context.Context, string) ([]string, error) { return all, nil },
		func(key string) (*goredis.PubSub, bool) {
			i, _ := strconv.Atoi(key)
			return nodes[i].Subscribe(context.Background()), false
		},
		func(ctx context.Context, k keys, id string) {
			r.everyNode(ctx, func(ctx context.Context, c goredis.UniversalClient) error { return c.ZRem(ctx, k.queue, id).Err() })
		},
		r.pass,
	)
	r.hub.quorum = r.quorum
	r.names = newNameCache(prefix, r.hub.id)
	return r
}

// pass passes a release's wake-up, which reached this Locker when none of
// its waiters of the name was left, on to the next registered Locker on
// every node where the lock is still free (pass.lua).
func (r *redlock) pass(ctx context.Context, k keys, payload string) {
	var list [passArgc]any
	args := append(passScript.args(list[:0], "2"), k.lock, k.queue, "PUBLISH", payload, k.channel)
	r.everyNode(ctx, func(ctx context.Context, c goredis.UniversalClient) error { return passScript.run(ctx, c, args).Err() })
}

// everyNode runs a clean-up's op on every node in parallel, each call
// bounded by cleanupTimeout, and returns once every node has answered.
func (r *redlock) everyNode(ctx context.Context, op func(ctx context.Context, c goredis.UniversalClient) error) {
	done := r.fanout(ctx, cleanupTimeout, func(ctx context.Context, c goredis.UniversalClient) outcome {
		return outcome{err: op(ctx, c)}
	})
	for range r.nodes {
		<-done
	}
}

func (r *redlock) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Backend:              "redis",
		Strategy:             "redlock",
		Fencing:              false,
		FencingNote:          "no: every node keeps its own INCR counter and Token is the largest counter of the granting quorum, which can go backwards when quorums differ or a node restarts without persistence",
		TokensSurviveRestart: false,
		Fair:                 false,
		Wait:                 driver.WaitNotify,
		ReleaseOnCrash:       driver.ReleaseAfterTTL,
		MinTTL:               redlockMinTTL,
		MaxTTL:               MaxTTL,
		Notes:                "quorum N/2+1 of independent masters; validity = TTL - elapsed - (1% of TTL + 2ms); concurrent attempts can split the votes so that none wins (they retry after a random delay); safe only with bounded clock drift and no process pauses longer than the validity; a node restarted without persistence must stay down for one TTL",
	}
}

func (r *redlock) Close() error {
	r.refresher.close()
	err := r.hub.close()
	r.crew.close()
	if r.owned {
		for _, c := range r.nodes {
			if cerr := c.Close(); cerr != nil && !errors.Is(cerr, goredis.ErrClosed) {
				err = errors.Join(err, cerr)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("redis: close: %w", err)
	}
	return nil
}

func (r *redlock) Watch(ctx context.Context, req driver.Request) (<-chan struct{}, func(), error) {
	return r.hub.watch(ctx, r.names.get(req.Name))
}

// redlockMinTTL is the shortest lease Redlock promises to grant: a
// quorum's round trips must fit in the validity (TTL - elapsed - drift),
// and a 5 ms TTL leaves 2.95 ms, which five nodes under load miss (CI saw
// TryAcquire of a free name fail so, in the conformance case TTLRange).
const redlockMinTTL = 100 * time.Millisecond

// drift is the clock drift margin of Redlock's validity rule: the portable
// layer's own (driver.Drift), so a grant this driver accepts is one whose
// local deadline (start + TTL - drift) has not passed.
func drift(ttl time.Duration) time.Duration { return driver.Drift(ttl) }

// outcome is one node's answer.
type outcome struct {
	ok  bool  // granted, refreshed or released
	n   int64 // token (granted) or PTTL (refused)
	err error // nil: the node answered
}

// fanout runs op on every node in parallel, each call bounded by timeout
// but not cancelled with ctx: a request in flight runs to its answer (or
// its timeout), so that what it did on a node is known before the key is
// taken back there. Callers stop waiting when ctx ends. The channel is
// buffered for every answer, so a caller may stop reading.
// The calls share one deadline (one context and timer per fanout, not
// one per node), which the last call to return cancels.
func (r *redlock) fanout(ctx context.Context, timeout time.Duration, op func(ctx context.Context, c goredis.UniversalClient) outcome) <-chan outcome {
	out := make(chan outcome, len(r.nodes))
	d := &sharedDeadline{}
	ctx, d.cancel = context.WithTimeout(context.WithoutCancel(ctx), timeout)
	d.left.Store(int32(len(r.nodes)))
	for _, c := range r.nodes {
		r.crew.run(func() {
			o := op(ctx, c)
			d.done()
			out <- o
		})
	}
	return out
}

// crewKeep is how many idle members a Redlock Locker's crew keeps: as
// many as its clients can have requests in flight at once (each node's
// connection pool), so that concurrent attempts up to what the pools
// serve find members whose stacks have grown already (32 goroutines of
// one Locker on distinct names: 96 node calls at once). An idle member
// costs its stack, a few KB.
func crewKeep(nodes []goredis.UniversalClient) int {
	n := 0
	for _, c := range nodes {
		size := 10 * runtime.GOMAXPROCS(0) // go-redis's default
		if o, ok := c.(*goredis.Client); ok && o.Options().PoolSize > 0 {
			size = o.Options().PoolSize
		}
		n += size
	}
	return n
}

// sharedDeadline is a fanout's context's cancel, called by the last of its
// calls to return.
type sharedDeadline struct {
	left   atomic.Int32
	cancel context.CancelFunc
}

func (d *sharedDeadline) done() {
	if d.left.Add(-1) == 0 {
		d.cancel()
	}
}

func (r *redlock) TryAcquire(ctx context.Context, req driver.Request) (driver.Lease, error) {
	start := time.Now()
	budget := req.TTL - drift(req.TTL)
	if budget <= 0 {
		return nil, fmt.Errorf("redis: redlock: %w: TTL %v leaves no validity after the drift margin %v", dlock.ErrInvalidOption, req.TTL, drift(req.TTL))
	}
	if err := r.checkNodes(ctx, min(r.nodeTimeout, budget)); err != nil {
		return nil, err
	}
	k := r.names.get(req.Name)
	ls := &rlease{r: r, k: k, value: r.values.next(req.Owner)}
	ls.valueArg = ls.value
	reg := r.hub.registration(k)
	// Every node's request reads the one argument list.
	s, args := acquireArgs(ls.args[:], k, ls.valueArg, r.ttl.get(req.TTL), reg)
	results := r.fanout(ctx, min(r.nodeTimeout, budget), func(ctx context.Context, c goredis.UniversalClient) outcome {
		if f := testBeforeNodeAcquire.Load(); f != nil {
			(*f)(slices.Index(r.nodes, c), reg.id != nil)
		}
		granted, n, err := runAcquire(ctx, c, s, args)
		return outcome{ok: granted, n: n, err: err}
	})
	n := len(r.nodes)
	v := &votes{retry: -1} // one allocation: the clean-up reads the counts
wait:
	for v.answered < n && v.granted < r.quorum && v.answered-v.granted <= n-r.quorum {
		select {
		case o := <-results:
			v.count(o)
			v.answered++
		case <-ctx.Done():
			break wait
		}
	}
	if v.granted >= r.quorum && ctx.Err() == nil && time.Since(start) < budget {
		r.hub.registered(k, reg, true, nil)
		ls.token, ls.late, ls.nlate = v.token, results, n-v.answered
		return ls, nil
	}
	// No valid quorum: wait for the answers still out (bounded by the node
	// timeout), then take back every key this attempt may have set, with a
	// fresh context, so that nothing of it blocks another acquirer. In the
	// background: a cancelled caller returns when its ctx ends (Close
	// waits for the clean-up); the counts are read only once it is done.
	done := r.hub.cleanup(func() {
		for ; v.answered < n; v.answered++ {
			v.count(<-results)
		}
		// Only now that every node has answered is the attempt's
		// registration in the waiter queue known to be made: recorded
		// earlier, the last waiter's leave could reach a node before a
		// late acquire did, which then registered this Locker again
		// after it left (a queue entry left behind for regLifetime).
		r.hub.registered(k, reg, false, nil)
		if v.granted > 0 || v.slow > 0 || len(v.errs) > 0 {
			// Without a publish: waking every waiter for a lock that was
			// never held would have them all fan out at once and split
			// the votes again. They retry after the portable layer's
			// random delay.
			cctx, cancel := cleanupContext(ctx)
			takeBack(cctx, func(ctx context.Context) bool {
				r.releaseAll(ctx, releaseArgs(ls.args[:], k, ls.valueArg, ""))
				// A node that was slow or failed may apply the attempt
				// late: release there once more.
				return v.slow == 0 && len(v.errs) == 0
			})
			cancel()
		}
	})
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case len(v.errs) < r.quorum && v.refused >= r.quorum:
		return nil, notAcquired(v.retry) // held by another owner
	case len(v.errs) < r.quorum:
		// Split votes between concurrent attempts, slow nodes, a minority
		// of failed ones, or a quorum that came too late for the lease's
		// validity: Redlock retries after a delay. "Held by another owner"
		// would be untrue (no quorum of nodes said so).
		return nil, fmt.Errorf("redis: redlock: %w", &driver.NotAcquiredError{RetryAfter: fromMillis(v.retry), Reason: fmt.Sprintf(
			"no quorum within the lease's validity (%d of %d nodes granted, %d held it for another attempt, %d answered late, %d failed; %d needed)",
			v.granted, n, v.refused, v.slow, len(v.errs), r.quorum)})
	}
	return nil, fmt.Errorf("redis: redlock: %d of %d nodes failed, %d needed: %w", len(v.errs), n, r.quorum, errors.Join(v.errs...))
}

// votes counts the nodes' answers to an attempt.
type votes struct {
	granted, refused, slow, answered int
	token                            uint64 // the largest granted token
	retry                            int64  // the shortest PTTL refused with, or -1
	errs                             []error
}

func (v *votes) count(o outcome) {
	switch {
	case o.err != nil && isTimeout(o.err):
		v.slow++ // a node that misses its budget has not voted for us
	case o.err != nil:
		v.errs = append(v.errs, o.err)
	case o.ok:
		v.granted++
		v.token = max(v.token, uint64(o.n))
	default:
		v.refused++
		if o.n > 0 && (v.retry < 0 || o.n < v.retry) {
			v.retry = o.n
		}
	}
}

// testBeforeNodeAcquire, set by a test only, runs before an attempt's
// request to node i; registering: the attempt registers this Locker in
// the name's waiter queue (TestRedlockLateRegistration).
var testBeforeNodeAcquire atomic.Pointer[func(i int, registering bool)]

// isTimeout reports a request that ran out of its time budget.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// releaseAll runs release.lua with the list of releaseArgs on every node
// and counts the answers.
func (r *redlock) releaseAll(ctx context.Context, args []any) (released, notHeld int, errs []error) {
	results := r.fanout(ctx, cleanupTimeout, func(ctx context.Context, c goredis.UniversalClient) outcome {
		ok, err := releaseOn(ctx, c, args)
		return outcome{ok: ok, err: err}
	})
	var t tally
	for range r.nodes {
		t.add(<-results)
	}
	return t.ok, t.no, t.errs
}

// tally counts the nodes' answers to a refresh or a release.
type tally struct {
	ok, no int // done; not held (any more) by this grant
	errs   []error
}

func (t *tally) add(o outcome) {
	switch {
	case o.err != nil:
		t.errs = append(t.errs, o.err)
	case o.ok:
		t.ok++
	default:
		t.no++
	}
}

func (r *redlock) Inspect(ctx context.Context, name string) (driver.Info, error) {
	k := r.names.get(name)
	type state struct {
		value string
		held  bool
		pttl  int64
		fence uint64
		err   error
	}
	out := make(chan state, len(r.nodes))
	for _, c := range r.nodes {
		go func() {
			v, err := inspectScript.Run(ctx, c, []string{k.lock, k.fence}).Slice()
			var s state
			s.err = err
			if err == nil {
				s.value, s.held, s.pttl, s.fence = inspectReply(v)
			}
			out <- s
		}()
	}
	info := driver.Info{Waiters: -1}
	votes := make(map[string]int)
	minTTL := make(map[string]int64)
	var errs []error
	for range r.nodes {
		s := <-out
		if s.err != nil {
			errs = append(errs, s.err)
			continue
		}
		info.Fence = max(info.Fence, s.fence)
		if s.held {
			votes[s.value]++
			if t, ok := minTTL[s.value]; !ok || s.pttl < t {
				minTTL[s.value] = s.pttl
			}
		}
	}
	if len(errs) > len(r.nodes)-r.quorum {
		return driver.Info{}, fmt.Errorf("redis: redlock: inspect: %w", errors.Join(errs...))
	}
	for v, c := range votes {
		if c >= r.quorum {
			info.Held, info.Owner = true, ownerOf(v)
			info.TTL = fromMillis(minTTL[v])
		}
	}
	return info, nil
}

// rlease is one Redlock grant.
type rlease struct {
	r        *redlock
	k        *names
	value    string
	valueArg any // value, boxed
	token    uint64
	// args is the argument list of the acquire, then of the release
	// (which runs after every node answered the acquire).
	args [max(acquireArgc, releaseArgc)]any
	// late are the answers of the acquire that were still out when the
	// quorum was reached; Release waits for them (bounded by the node
	// timeout), so that it deletes what they set.
	late  <-chan outcome
	nlate int
}

func (ls *rlease) Token() uint64         { return ls.token }
func (ls *rlease) Lost() <-chan struct{} { return nil }

// Refresh extends the key on every node that still holds this grant's
// value; it succeeds when a quorum did so within the validity.
func (ls *rlease) Refresh(ctx context.Context, ttl time.Duration) error {
	r := ls.r
	start := time.Now()
	budget := ttl - drift(ttl)
	ttlArg := r.ttl.get(ttl)
	n := len(r.nodes)
	var t tally
	out, err := r.refresher.refresh(ctx, ls.k, ls.valueArg, ttlArg, ttl)
	if err != nil {
		t.errs = append(t.errs, err)
	}
	for _, o := range out {
		t.add(o)
	}
	switch {
	case t.ok >= r.quorum && time.Since(start) < budget:
		return nil
	case t.ok >= r.quorum:
		return fmt.Errorf("redis: redlock: refresh took %v, past the validity of a %v lease", time.Since(start), ttl)
	case t.no > n-r.quorum:
		return fmt.Errorf("redis: redlock: refresh: %d of %d nodes no longer hold it: %w", t.no, n, driver.ErrNotHeld)
	}
	return fmt.Errorf("redis: redlock: refresh: %d of %d nodes, %d needed: %w", t.ok, n, r.quorum, errors.Join(t.errs...))
}

// Release deletes the key on every node that still holds this grant's
// value, and publishes the release there.
func (ls *rlease) Release(ctx context.Context) error {
	r := ls.r
	for range ls.nlate {
		<-ls.late
	}
	ls.nlate = 0
	released, notHeld, errs := r.releaseAll(ctx, releaseArgs(ls.args[:], ls.k, ls.valueArg, "PUBLISH"))
	switch {
	case released >= r.quorum:
		return nil
	case notHeld > len(r.nodes)-r.quorum:
		return fmt.Errorf("redis: redlock: release: %d of %d nodes no longer held it: %w", notHeld, len(r.nodes), driver.ErrNotHeld)
	}
	return fmt.Errorf("redis: redlock: release: %d of %d nodes, %d needed: %w", released, len(r.nodes), r.quorum, errors.Join(errs...))
}
