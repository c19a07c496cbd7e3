// Package otel is the OpenTelemetry adapter of dlock's Observer hook, in a
// module of its own so that the library's go.mod gains nothing:
//
//	obs, err := otel.NewObserver(nil) // the global meter and tracer providers
//	l, err := dlock.OpenWith(ctx, "redis://127.0.0.1:6379/0", &dlock.Options{Observer: obs})
//
// # Metrics
//
// Instruments of the meter "github.com/dlock-go/dlock/otel":
//
//	dlock.acquire.wait      histogram (s)  from an Acquire's or TryAcquire's start to its grant or failure
//	dlock.lease.hold        histogram (s)  from a grant to the release or loss
//	dlock.refresh.latency   histogram (s)  one refresh (keep-alive or Lease.Refresh)
//	dlock.grants            counter        locks and permits granted
//	dlock.leases.lost       counter        leases lost (expired, revoked, found gone)
//	dlock.refresh.failures  counter        refreshes that failed
//
// Their attributes are dlock.backend ("redis"), dlock.strategy ("set-nx"),
// dlock.kind ("lock" or "semaphore") and, on the histograms and the
// refresh failures, dlock.outcome (dlock.Event.Outcome: "ok",
// "not-acquired", "canceled", "closed", "lost", "error"). The lock's name is never an attribute of a metric:
// names are unbounded.
//
// # Traces
//
// A span "dlock.acquire" covers each Acquire and TryAcquire, as a child
// of the span in the caller's context; the wait and each wake-up are
// events in it. A span "dlock.lease", its child, covers each lease from
// grant to release or loss, with an event per failed refresh; a lost
// lease ends it with an error status. Spans carry the attributes above,
// dlock.permits for a semaphore's permit, dlock.token once granted, and
// dlock.name only when Options.SpanNames is set.
package otel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	otelapi "go.opentelemetry.io/otel"

	"github.com/dlock-go/dlock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/dlock-go/dlock/otel"

// Options configure NewObserver. A nil *Options, and every zero field,
// means the default.
type Options struct {
	// MeterProvider provides the meter (default: the global one,
	// otel.GetMeterProvider()).
	MeterProvider metric.MeterProvider
	// TracerProvider provides the tracer (default: the global one,
	// otel.GetTracerProvider()).
	TracerProvider trace.TracerProvider
	// SpanNames puts the lock's name on spans as dlock.name. Off by
	// default: a name can say more than a trace should carry (a user id,
	// an order number).
	SpanNames bool
}

// Observer is a dlock.Observer that records metrics and spans. It is safe
// for concurrent use and may serve several Lockers.
type Observer struct {
	tracer    trace.Tracer
	spanNames bool

	wait, hold, refresh      metric.Float64Histogram
	grants, lost, refreshErr metric.Int64Counter

	acquires sync.Map // Event.ID → trace.Span of an acquisition in flight
	leases   sync.Map // Event.ID → trace.Span of a live lease, or ended{}
}

// ended marks a lease whose end was observed before its grant.
type ended struct{}

var _ dlock.Observer = (*Observer)(nil)

// NewObserver returns an Observer recording to the providers of opts. It
// fails only when an instrument cannot be created.
func NewObserver(opts *Options) (*Observer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otelapi.GetMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otelapi.GetTracerProvider()
	}
	m := o.MeterProvider.Meter(ScopeName)
	obs := &Observer{tracer: o.TracerProvider.Tracer(ScopeName), spanNames: o.SpanNames}
	var err error
	hist := func(name, desc string) metric.Float64Histogram {
		var h metric.Float64Histogram
		if err == nil {
			h, err = m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc))
		}
		return h
	}
	count := func(name, desc string) metric.Int64Counter {
		var c metric.Int64Counter
		if err == nil {
			c, err = m.Int64Counter(name, metric.WithUnit("{"+name[len("dlock."):]+"}"), metric.WithDescription(desc))
		}
		return c
	}
	obs.wait = hist("dlock.acquire.wait", "Time from the start of an Acquire or TryAcquire to its grant or failure.")
	obs.hold = hist("dlock.lease.hold", "Time a lease was held, from its grant to its release or loss.")
	obs.refresh = hist("dlock.refresh.latency", "Latency of a lease refresh.")
	obs.grants = count("dlock.grants", "Locks and semaphore permits granted.")
	obs.lost = count("dlock.leases.lost", "Leases lost: expired, revoked or found gone.")
	obs.refreshErr = count("dlock.refresh.failures", "Lease refreshes that failed.")
	if err != nil {
		return nil, err
	}
	return obs, nil
}

func kind(e dlock.Event) string {
	if e.Permits > 0 {
		return "semaphore"
	}
	return "lock"
}

// attrs are a metric's attributes: bounded values only.
func attrs(e dlock.Event, outcome bool) metric.MeasurementOption {
	a := []attribute.KeyValue{
		attribute.String("dlock.backend", e.Backend),
		attribute.String("dlock.strategy", e.Strategy),
		attribute.String("dlock.kind", kind(e)),
	}
	if outcome {
		a = append(a, attribute.String("dlock.outcome", e.Outcome()))
	}
	return metric.WithAttributes(a...)
}

// spanAttrs are a span's attributes at its start.
func (o *Observer) spanAttrs(e dlock.Event) trace.SpanStartEventOption {
	a := []attribute.KeyValue{
		attribute.String("dlock.backend", e.Backend),
		attribute.String("dlock.strategy", e.Strategy),
		attribute.String("dlock.kind", kind(e)),
	}
	if e.Permits > 0 {
		a = append(a, attribute.Int("dlock.permits", e.Permits))
	}
	if o.spanNames {
		a = append(a, attribute.String("dlock.name", e.Name))
	}
	return trace.WithAttributes(a...)
}

// Observe records e.
func (o *Observer) Observe(ctx context.Context, e dlock.Event) {
	switch e.Kind {
	case dlock.EventAttempt:
		_, span := o.tracer.Start(ctx, "dlock.acquire", o.spanAttrs(e),
			trace.WithAttributes(attribute.Bool("dlock.wait", e.Wait)))
		o.acquires.Store(e.ID, span)
	case dlock.EventWait, dlock.EventWake:
		if span, ok := o.acquires.Load(e.ID); ok {
			span.(trace.Span).AddEvent(e.Kind.String(), trace.WithAttributes(attribute.Bool("dlock.woken", e.Woken)))
		}
	case dlock.EventGranted:
		o.wait.Record(ctx, e.Elapsed.Seconds(), attrs(e, true))
		o.grants.Add(ctx, 1, attrs(e, false))
		v, ok := o.acquires.LoadAndDelete(e.ID)
		if !ok {
			return
		}
		span := v.(trace.Span)
		span.SetAttributes(attribute.Int64("dlock.token", int64(e.Token)), attribute.Bool("dlock.reentrant", e.Reentrant))
		// A lease lost in the instant between its grant and this event
		// has ended already (its end left a marker): no span for it.
		if _, gone := o.leases.LoadAndDelete(e.ID); !e.Reentrant && !gone {
			_, lease := o.tracer.Start(trace.ContextWithSpan(ctx, span), "dlock.lease", o.spanAttrs(e),
				trace.WithAttributes(attribute.Int64("dlock.token", int64(e.Token))))
			o.leases.Store(e.ID, lease)
		}
		span.End()
	case dlock.EventNotAcquired:
		o.wait.Record(ctx, e.Elapsed.Seconds(), attrs(e, true))
		if v, ok := o.acquires.LoadAndDelete(e.ID); ok {
			span := v.(trace.Span)
			outcome := e.Outcome()
			span.SetAttributes(attribute.String("dlock.outcome", outcome))
			if outcome == "error" {
				span.RecordError(e.Err)
				span.SetStatus(codes.Error, e.Err.Error())
			}
			span.End()
		}
	case dlock.EventRefresh:
		o.refresh.Record(ctx, e.Elapsed.Seconds(), attrs(e, true))
		if e.Err != nil {
			o.refreshErr.Add(ctx, 1, attrs(e, true))
			if span, ok := o.leases.Load(e.ID); ok {
				span.(trace.Span).RecordError(e.Err)
			}
		}
	case dlock.EventLost, dlock.EventReleased:
		o.hold.Record(ctx, e.Elapsed.Seconds(), attrs(e, true))
		lost := e.Kind == dlock.EventLost || e.Outcome() == "lost" // found gone at release
		if lost {
			o.lost.Add(ctx, 1, attrs(e, false))
		}
		v, ok := o.leases.LoadAndDelete(e.ID)
		if !ok {
			// Ended before its EventGranted was observed: leave a marker
			// for it (a lease's grant is always observed).
			o.leases.Store(e.ID, ended{})
			return
		}
		span := v.(trace.Span)
		span.SetAttributes(attribute.String("dlock.outcome", e.Outcome()))
		if e.Kind == dlock.EventLost {
			span.SetAttributes(attribute.Float64("dlock.margin", e.Margin.Seconds()))
		}
		if lost {
			span.SetStatus(codes.Error, e.Err.Error())
		}
		span.End()
	}
}
