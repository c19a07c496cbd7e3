package otel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/dlock-go/dlock/otel"
	_ "github.com/dlock-go/dlock/redis"
)

// setup returns an Observer recording into an in-memory reader and span
// recorder.
func setup(t *testing.T) (*otel.Observer, *sdkmetric.ManualReader, *tracetest.SpanRecorder) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	obs, err := otel.NewObserver(&otel.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return obs, reader, spans
}

// collect returns the metrics by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// counts returns a counter's or a histogram's count by outcome (or "" for
// data points without one), checking that every data point has the
// Redis backend's attributes and none is the lock name.
func counts(t *testing.T, name string, data metricdata.Aggregation, lockName string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	check := func(set attribute.Set) string {
		if v, _ := set.Value("dlock.backend"); v.AsString() != "redis" {
			t.Errorf("%s: backend %q", name, v.AsString())
		}
		if v, _ := set.Value("dlock.strategy"); v.AsString() == "" {
			t.Errorf("%s: no strategy", name)
		}
		for _, kv := range set.ToSlice() {
			if strings.Contains(kv.Value.Emit(), lockName) {
				t.Errorf("%s: attribute %s = %q holds the lock name", name, kv.Key, kv.Value.Emit())
			}
		}
		v, _ := set.Value("dlock.outcome")
		return v.AsString()
	}
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out[check(p.Attributes)] += p.Value
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out[check(p.Attributes)] += int64(p.Count)
		}
	case nil:
	default:
		t.Fatalf("%s: unexpected %T", name, data)
	}
	return out
}

// Against a real Redis: a grant, a refusal, a refresh that fails and a
// lost lease show in the metrics, by outcome and never by name, and as
// spans: dlock.acquire with dlock.lease as its child.
func TestObserverRedis(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := testenv.Context(t, time.Minute)
	obs, reader, spans := setup(t)
	l, err := dlock.OpenWith(ctx, srv.URL, &dlock.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other, err := dlock.Open(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const name = "otel-test-lock-name"

	ls, err := l.Acquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := other.Acquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, name, nil); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire = %v", err)
	}
	held.Release(ctx)

	// A lease whose key is deleted under it: its refresh finds it gone.
	ls, err = l.Acquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer raw.Close()
	keys, err := raw.Keys(ctx, "*"+name+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, ":fence") {
			raw.Del(ctx, k)
		}
	}
	if err := ls.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh of a deleted lease = %v", err)
	}
	<-ls.Done()

	m := collect(t, reader)
	if got := counts(t, "dlock.grants", m["dlock.grants"], name); got[""] != 2 {
		t.Errorf("grants = %v, want 2", got)
	}
	if got := counts(t, "dlock.acquire.wait", m["dlock.acquire.wait"], name); got["ok"] != 2 || got["not-acquired"] != 1 {
		t.Errorf("wait histogram by outcome = %v, want 2 ok, 1 not-acquired", got)
	}
	if got := counts(t, "dlock.lease.hold", m["dlock.lease.hold"], name); got["ok"] != 1 || got["lost"] != 1 {
		t.Errorf("hold histogram by outcome = %v, want 1 ok, 1 lost", got)
	}
	if got := counts(t, "dlock.leases.lost", m["dlock.leases.lost"], name); got[""] != 1 {
		t.Errorf("lost = %v, want 1", got)
	}
	if got := counts(t, "dlock.refresh.failures", m["dlock.refresh.failures"], name); got["lost"] != 1 {
		t.Errorf("refresh failures = %v, want 1 (lost)", got)
	}
	if got := counts(t, "dlock.refresh.latency", m["dlock.refresh.latency"], name); got["lost"] != 1 {
		t.Errorf("refresh latency by outcome = %v, want 1 lost", got)
	}

	var acquires, leases []sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		switch s.Name() {
		case "dlock.acquire":
			acquires = append(acquires, s)
		case "dlock.lease":
			leases = append(leases, s)
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "dlock.name" {
				t.Errorf("span %s has the lock name without SpanNames", s.Name())
			}
		}
	}
	if len(acquires) != 3 || len(leases) != 2 {
		t.Fatalf("%d acquire and %d lease spans, want 3 and 2", len(acquires), len(leases))
	}
	if leases[0].Parent().SpanID() != acquires[0].SpanContext().SpanID() {
		t.Errorf("the lease span is not the child of its acquire span")
	}
	if leases[0].Status().Code == codes.Error || leases[1].Status().Code != codes.Error {
		t.Errorf("lease span statuses = %v, %v: want the lost one an error", leases[0].Status(), leases[1].Status())
	}
	if n := len(spans.Started()) - len(spans.Ended()); n != 0 {
		t.Errorf("%d spans left open", n)
	}
}
