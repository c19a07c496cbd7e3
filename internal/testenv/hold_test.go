package testenv

import (
	"net"
	"slices"
	"testing"
	"time"
)

// TestHoldIgnoresTheProcessTraffic: a hold of 1ms during which another
// goroutine of the process receives a datagram (at 600µs) lasts what a
// hold without one does, where a time.Sleep(1ms) lasts until a
// millisecond after the datagram (see Hold). Holds with and without
// a datagram alternate, so that a loaded machine delays both alike; the
// datagram may add at most 250µs to the p50 of 41 (three tries). With
// time.Sleep in Hold's place it adds about 600µs, and the test fails.
func TestHoldIgnoresTheProcessTraffic(t *testing.T) {
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := net.DialUDP("udp", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	go func() {
		buf := make([]byte, 16)
		for {
			if _, err := rx.Read(buf); err != nil {
				return
			}
		}
	}()
	const hold, wake, limit = time.Millisecond, 600 * time.Microsecond, 250 * time.Microsecond
	p50 := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	// measure returns the p50s of holds without and with a datagram.
	measure := func(sleep func(time.Duration)) (quiet, woken time.Duration) {
		var qs, ws []time.Duration
		for range 41 {
			t0 := time.Now()
			sleep(hold)
			qs = append(qs, time.Since(t0))
			time.Sleep(time.Millisecond)
			go func() {
				// Busy until the wake-up: a timer would itself wake late.
				for t0 := time.Now(); time.Since(t0) < wake; {
				}
				tx.Write([]byte("x"))
			}()
			t0 = time.Now()
			sleep(hold)
			ws = append(ws, time.Since(t0))
			time.Sleep(2 * time.Millisecond) // the datagram is read
		}
		return p50(qs), p50(ws)
	}
	var quiet, woken time.Duration
	for try := range 3 {
		quiet, woken = measure(Hold)
		sq, sw := measure(time.Sleep)
		t.Logf("try %d: Hold(1ms) p50 %v, with a datagram %v; time.Sleep(1ms) p50 %v, with a datagram %v", try+1, quiet, woken, sq, sw)
		if woken-quiet < limit {
			return
		}
	}
	t.Fatalf("a datagram received during a 1ms hold made it last %v (p50) against %v without one: more than %v longer", woken, quiet, limit)
}
