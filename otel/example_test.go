package otel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlock-go/dlock"
	_ "github.com/dlock-go/dlock/memory"
	"github.com/dlock-go/dlock/otel"
)

// A Locker whose Observer records OpenTelemetry metrics (here into an
// in-memory reader; a program passes its MeterProvider and
// TracerProvider, or nil options for the global ones).
func ExampleNewObserver() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	obs, err := otel.NewObserver(&otel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		panic(err)
	}
	l, err := dlock.OpenWith(ctx, "mem://", &dlock.Options{Observer: obs})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for range 3 {
		lease, err := l.Acquire(ctx, "orders/42", nil)
		if err != nil {
			panic(err)
		}
		lease.Release(ctx)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			fmt.Println(m.Name, d.DataPoints[0].Value)
		case metricdata.Histogram[float64]:
			fmt.Println(m.Name, d.DataPoints[0].Count)
		}
	}
	// Unordered output:
	// dlock.acquire.wait 3
	// dlock.grants 3
	// dlock.lease.hold 3
}
