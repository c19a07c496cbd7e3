package dlock_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/dlock-go/dlock"
	_ "github.com/dlock-go/dlock/memory"
)

// The cost of the portable layer per Acquire+Release, on the memory driver
// (no network: what is left is the layer and an in-process map). Run with
// -benchmem: allocs/op is the figure to keep down. Each driver's own
// benchmarks measure the same against its server.

// BenchmarkAcquireRelease acquires and releases one name over and over.
func BenchmarkAcquireRelease(b *testing.B) {
	benchAcquireRelease(b, func(int) string { return "bench/one" })
}

// BenchmarkAcquireReleaseFreshName locks a new name each time
// ("orders/42", "orders/43", ...), as applications do.
func BenchmarkAcquireReleaseFreshName(b *testing.B) {
	benchAcquireRelease(b, func(i int) string { return "bench/" + strconv.Itoa(i) })
}

func benchAcquireRelease(b *testing.B, name func(int) string) {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "mem://")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	names := make([]string, b.N)
	for i := range names {
		names[i] = name(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		ls, err := l.Acquire(ctx, names[i], nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
