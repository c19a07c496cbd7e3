package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

// nameClient records the names it is asked for.
type nameClient struct {
	altClient
	mu    sync.Mutex
	names []string
}

func (c *nameClient) Acquire(ctx context.Context, name string) (Held, error) {
	c.mu.Lock()
	c.names = append(c.names, name)
	c.mu.Unlock()
	if _, err := c.altClient.Acquire(ctx, name); err != nil {
		return nil, err
	}
	// The token of a name's first holder on a per-name counter.
	return altHeld(1), nil
}

// TestFreshNamesAreNeverReused: on fresh names every timed operation of a
// target locks a name no operation used before, and one whose tokens
// restart per name (as a per-name counter does) is no fencing violation.
func TestFreshNamesAreNeverReused(t *testing.T) {
	tg, st := altTarget(t, "fresh-names")
	var c *nameClient
	openers["test-names"] = func(ctx context.Context, _ Target) (Client, error) {
		c = &nameClient{altClient: altClient{s: st}}
		return c, nil
	}
	t.Cleanup(func() { delete(openers, "test-names") })
	tg.Impl = "test-names"
	w := uncontended(40 * time.Millisecond)
	w.Fresh = true
	if w.Label() != FreshLabel {
		t.Fatalf("label %q, want %q", w.Label(), FreshLabel)
	}
	res, why, err := RunAlternating(ctxT(t, time.Minute), []Target{tg}, w, 3, nil)
	if err != nil || len(why) > 0 {
		t.Fatal(err, why)
	}
	seen := map[string]int{}
	var warm string
	for _, n := range c.names {
		seen[n]++
		if seen[n] > 1 {
			warm = n
		}
	}
	// The warm-up of each slice uses the target's own name, every timed
	// operation a new one.
	var grants uint64
	for _, r := range res[tg.Name] {
		grants += r.Grants[0]
		if r.Fencing != 0 || r.Exclusion != 0 {
			t.Errorf("violations %d/%d on fresh names", r.Exclusion, r.Fencing)
		}
	}
	if grants < 10 {
		t.Fatalf("%d grants", grants)
	}
	for n, k := range seen {
		if k > 1 && n != warm {
			t.Errorf("name %q used %d times, and so was %q", n, k, warm)
		}
	}
	if len(seen) < int(grants) {
		t.Errorf("%d distinct names for %d timed grants", len(seen), grants)
	}
}

// TestFinalizePairsFreshRowsWithFreshFloors: a row on fresh names is
// compared with its floor on fresh names, and a one-name row with the
// one-name floor.
func TestFinalizePairsFreshRowsWithFreshFloors(t *testing.T) {
	dl := roundsRow("dl", KindDlock, Uncontended, uses(200, 200, 200)...)
	floor := roundsRow("floor", KindFloor, Uncontended, uses(100, 100, 100)...)
	dlF := roundsRow("dl", KindDlock, Uncontended, uses(900, 900, 900)...)
	floorF := roundsRow("floor", KindFloor, Uncontended, uses(300, 300, 300)...)
	dl.Label, floor.Label, dlF.Label, floorF.Label = Uncontended, Uncontended, FreshLabel, FreshLabel
	Finalize([]*Row{dl, floor, dlF, floorF}, []Target{{Name: "dl", Floor: "floor"}}, nil)
	if m := Med(dl.ToFloor); m != 2 {
		t.Errorf("one name: ×floor %v, want 2", m)
	}
	if m := Med(dlF.ToFloor); m != 3 {
		t.Errorf("fresh names: ×floor %v, want 3", m)
	}
}

// TestScaleCurvesOnMemory: every point of every curve measures the
// in-process backend (no floor), and the report draws the curves.
func TestScaleCurvesOnMemory(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	tg := MemoryTarget()
	var rows []*Row
	for _, w := range scaleWorkloads(200*time.Millisecond, 200*time.Millisecond) {
		r, err := RunScale(ctx, tg, nil, w, nil)
		if err != nil || r.Skipped != "" {
			t.Fatalf("%s skipped: %s", w.Label(), r.Skipped)
		}
		if r.Violations != 0 || r.FencingViolations != 0 {
			t.Errorf("%s: violations %d/%d", w.Label(), r.Violations, r.FencingViolations)
		}
		switch w.Axis {
		case ScaleLeases:
			if r.CorePct == nil || r.Grants != uint64(w.Names) {
				t.Errorf("%s: core %v, %d leases held", w.Label(), r.CorePct, r.Grants)
			}
		default:
			if r.GrantsPerSec <= 0 || r.Rate == nil {
				t.Errorf("%s: %v grants/s", w.Label(), r.GrantsPerSec)
			}
		}
		rows = append(rows, r)
	}
	rep := &Report{Rows: rows}
	var html bytes.Buffer
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`data-chart="scale-names"`, `data-chart="scale-leases"`, `data-chart="scale-waiters"`, "<polyline", "10 000"} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	var table, csv bytes.Buffer
	rep.WriteTable(&table)
	if err := rep.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== scale names=10000 c=32", "== scale leases=1000", "== scale waiters=64 hold=1ms"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if !strings.Contains(csv.String(), "keepalive_core_pct") {
		t.Error("report.csv lacks the keep-alive column")
	}
	if v := Decide(rep); len(v.Workloads) != 0 {
		t.Errorf("the verdict judges the scale curves: %+v", v.Workloads)
	}
}

// TestScaleOnRedis: the names curve beside the fenced floor, and the
// waiters curve's server commands per grant.
func TestScaleOnRedis(t *testing.T) {
	srv := testenv.Redis(t)
	s := &Server{ID: "redis", Backend: "redis", URL: srv.URL}
	targets, _ := TargetsFor(s)
	var dl, floor Target
	for _, tg := range targets {
		switch {
		case tg.Kind == KindDlock:
			dl = tg
		case tg.Kind == KindFloor && tg.Name == "floor redis":
			floor = tg
		}
	}
	ctx := ctxT(t, 2*time.Minute)
	names, _ := RunScale(ctx, dl, &floor, Workload{Kind: Scale, Axis: ScaleNames, Clients: 8, Names: 100, Duration: 300 * time.Millisecond}, nil)
	if names.Skipped != "" || names.RateToFloor == nil || names.RateToFloor.Median <= 0 || names.FloorRate == nil {
		t.Fatalf("names: skipped %q, ratio %+v", names.Skipped, names.RateToFloor)
	}
	if names.Violations != 0 || names.FencingViolations != 0 {
		t.Errorf("names: violations %d/%d", names.Violations, names.FencingViolations)
	}
	waiters, _ := RunScale(ctx, dl, nil, Workload{Kind: Scale, Axis: ScaleWaiters, Clients: 4, Names: 1, Hold: time.Millisecond,
		Duration: 300 * time.Millisecond}, s.Sample)
	if waiters.Skipped != "" || waiters.Grants == 0 || waiters.ServerCmdsPerGrant <= 0 {
		t.Fatalf("waiters: skipped %q, %d grants, %v commands per grant", waiters.Skipped, waiters.Grants, waiters.ServerCmdsPerGrant)
	}
	// dlock's Redis driver sends only scripts: at least one request per
	// grant (the holder's release), never more than the commands.
	if r := waiters.ServerReqsPerGrant; r < 1 || r > waiters.ServerCmdsPerGrant {
		t.Errorf("waiters: %v requests per grant, %v commands", r, waiters.ServerCmdsPerGrant)
	}
	if waiters.Violations != 0 || waiters.FencingViolations != 0 {
		t.Errorf("waiters: violations %d/%d", waiters.Violations, waiters.FencingViolations)
	}
}

func init() {
	// Registered for good: the abandoned goroutines of the stuck point may
	// still read it.
	openers["test-scale-stuck"] = func(context.Context, Target) (Client, error) { return &stuckClient{}, nil }
}

// stuckClient's Acquire never returns: a driver that ignores its context.
type stuckClient struct{ altClient }

func (*stuckClient) Acquire(context.Context, string) (Held, error) { select {} }

// TestScaleAbandonsAStuckPoint: a point whose clients never return ends at
// its limit with a skipped row and ErrStuck, so the run goes on.
func TestScaleAbandonsAStuckPoint(t *testing.T) {
	old := scaleSlack
	scaleSlack = 200 * time.Millisecond
	defer func() { scaleSlack = old }()
	tg := Target{Name: "stuck", Kind: KindPeer, Impl: "test-scale-stuck", Backend: "test"}
	w := Workload{Kind: Scale, Axis: ScaleWaiters, Clients: 2, Names: 1, Hold: time.Millisecond, Duration: 50 * time.Millisecond}
	start := time.Now()
	row, err := RunScale(ctxT(t, time.Minute), tg, nil, w, nil)
	if !errors.Is(err, ErrStuck) || row.Skipped == "" {
		t.Fatalf("err %v, skipped %q; want ErrStuck and a skipped row (%+v)", err, row.Skipped, row)
	}
	if el := time.Since(start); el > scaleLimit(w)+time.Second {
		t.Errorf("took %v, limit %v", el, scaleLimit(w))
	}
}

// TestScaleLeasesStopsAtAFullPool: a strategy that pins a connection per
// lease cannot hold more leases than its pool has connections. The leases
// point takes what it can, measures those, and says how many of how many
// (on main it waited for a connection until the point was abandoned as
// stuck, and the target's later points were skipped).
func TestScaleLeasesStopsAtAFullPool(t *testing.T) {
	old := scaleAcquireLimit
	scaleAcquireLimit = 300 * time.Millisecond
	defer func() { scaleAcquireLimit = old }()
	u, err := url.Parse(testenv.Postgres(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("strategy", "forupdate")
	q.Set("pool_max_conns", "4")
	u.RawQuery = q.Encode()
	tg := Target{Name: "postgres/forupdate", Kind: KindDlock, Backend: "postgres", URL: u.String()}
	w := Workload{Kind: Scale, Axis: ScaleLeases, Clients: 1, Names: 10, Duration: 100 * time.Millisecond}
	row, err := RunScale(ctxT(t, 2*time.Minute), tg, nil, w, nil)
	if err != nil || row.Skipped != "" {
		t.Fatalf("err %v, skipped %q; want the leases it could hold measured", err, row.Skipped)
	}
	if row.Grants == 0 || row.Grants >= 10 || row.CorePct == nil {
		t.Fatalf("held %d of 10 leases on a pool of 4, core %% %v", row.Grants, row.CorePct)
	}
	if want := fmt.Sprintf("held %d of 10 leases", row.Grants); !strings.Contains(row.Note, want) {
		t.Errorf("note %q does not say %q", row.Note, want)
	}
	if !strings.Contains(row.Note, "pool") {
		t.Errorf("note %q does not say why", row.Note)
	}
}
