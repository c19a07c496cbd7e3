package faults

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with the same line, and counts lines.
func echoServer(t *testing.T) (addr string, lines chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lines = make(chan string, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					s, err := r.ReadString('\n')
					if err != nil {
						return
					}
					lines <- s
					if _, err := io.WriteString(c, s); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), lines
}

func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestProxyFaults(t *testing.T) {
	up, lines := echoServer(t)
	ps, err := NewProxies("test", []string{up})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.DialTimeout("tcp", ps.Listen(0), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	c, r := dial()
	if s, err := roundTrip(c, r, 2*time.Second); err != nil || s != "ping\n" {
		t.Fatalf("clean proxy: %q, %v", s, err)
	}
	<-lines

	t.Run("silent", func(t *testing.T) {
		heal, err := ps.Cut(CutSilent, -1)
		if err != nil {
			t.Fatal(err)
		}
		_, err = roundTrip(c, r, 300*time.Millisecond)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("silent cut: want a timeout, got %v", err)
		}
		select {
		case s := <-lines:
			t.Fatalf("silent cut: the server received %q", s)
		case <-time.After(100 * time.Millisecond):
		}
		heal()
		c2, r2 := dial()
		if s, err := roundTrip(c2, r2, 2*time.Second); err != nil || s != "ping\n" {
			t.Fatalf("after heal: %q, %v", s, err)
		}
		<-lines
		if _, err := roundTrip(c, r, 500*time.Millisecond); err == nil {
			t.Fatal("a connection cut silently still works after the heal; want it closed")
		}
	})

	t.Run("reset", func(t *testing.T) {
		heal, err := ps.Cut(CutReset, -1)
		if err != nil {
			t.Fatal(err)
		}
		c, r := dial()
		if _, err := roundTrip(c, r, 2*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("reset cut: want the connection reset, got %v", err)
		}
		heal()
		c2, r2 := dial()
		if s, err := roundTrip(c2, r2, 2*time.Second); err != nil || s != "ping\n" {
			t.Fatalf("after heal: %q, %v", s, err)
		}
		<-lines
	})

	t.Run("lost-reply", func(t *testing.T) {
		c, r := dial()
		if err := ps.LoseReplies(200 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		_, err := roundTrip(c, r, 2*time.Second)
		if err == nil {
			t.Fatal("lost reply: the reply arrived")
		}
		select {
		case s := <-lines:
			if s != "ping\n" {
				t.Fatalf("server got %q", s)
			}
		case <-time.After(time.Second):
			t.Fatal("lost reply: the request never reached the server")
		}
		time.Sleep(100 * time.Millisecond)
		c2, r2 := dial()
		if s, err := roundTrip(c2, r2, 2*time.Second); err != nil || s != "ping\n" {
			t.Fatalf("after the lost reply: %q, %v", s, err)
		}
		<-lines
	})

	t.Run("latency", func(t *testing.T) {
		c, r := dial()
		heal, err := ps.Latency(200*time.Millisecond, 0)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := roundTrip(c, r, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		<-lines
		if d := time.Since(start); d < 180*time.Millisecond {
			t.Fatalf("latency 200ms: round trip took %v", d)
		}
		heal()
	})

	t.Run("redirect", func(t *testing.T) {
		up2, lines2 := echoServer(t)
		if err := ps.Redirect(0, up2); err != nil {
			t.Fatal(err)
		}
		c, r := dial()
		if s, err := roundTrip(c, r, 2*time.Second); err != nil || s != "ping\n" {
			t.Fatalf("after redirect: %q, %v", s, err)
		}
		select {
		case <-lines2:
		case <-lines:
			t.Fatal("redirect: the old upstream got the request")
		}
	})
}

func TestProxyCutOnly(t *testing.T) {
	up0, lines0 := echoServer(t)
	up1, lines1 := echoServer(t)
	ps, err := NewProxies("test", []string{up0, up1})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	dial := func(i int) (net.Conn, *bufio.Reader) {
		c, err := net.DialTimeout("tcp", ps.Listen(i), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	heal, err := ps.Cut(CutSilent, 1)
	if err != nil {
		t.Fatal(err)
	}
	c0, r0 := dial(0)
	if s, err := roundTrip(c0, r0, 2*time.Second); err != nil || s != "ping\n" {
		t.Fatalf("server 0 while only server 1 is cut: %q, %v", s, err)
	}
	<-lines0
	c1, r1 := dial(1)
	if _, err := roundTrip(c1, r1, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("server 1 cut: want a timeout, got %v", err)
	}
	heal()
	c1, r1 = dial(1)
	if s, err := roundTrip(c1, r1, 2*time.Second); err != nil || s != "ping\n" {
		t.Fatalf("server 1 after the heal: %q, %v", s, err)
	}
	<-lines1
	if _, err := ps.Cut("sideways", -1); err == nil {
		t.Fatal("an unknown cut mode was accepted")
	}
}

// TestProxySilentCloseCrosses: under a silent cut, a client that gives up
// on its connection and closes it still closes the server's side, as the
// suite's partitions always did (a server-side session lock is freed when
// the holder's driver closes its connection, not only at the heal).
func TestProxySilentCloseCrosses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ended := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ended <- err
			return
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1))
		ended <- err
	}()
	ps, err := NewProxies("test", []string{ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	c, err := net.DialTimeout("tcp", ps.Listen(0), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	heal, err := ps.Cut(CutSilent, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer heal()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case err := <-ended:
		if err != io.EOF {
			t.Fatalf("the server's side after the client closed during a silent cut: %v, want EOF", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the client's close did not reach the server during a silent cut")
	}
}

// TestProxyRewrite: a client started after a failover gets the target's
// URL (the old addresses) rewritten to its proxies, which point at the
// new ones.
func TestProxyRewrite(t *testing.T) {
	up, lines := echoServer(t)
	ps, err := NewProxies("test", []string{up})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	const old = "127.0.0.1:1"
	url := "redis://" + old + "/0?addr=" + old + "0"
	if got, want := ps.Rewrite(url, []string{old}), "redis://"+ps.Listen(0)+"/0?addr="+old+"0"; got != want {
		t.Fatalf("Rewrite(%q) = %q, want %q", url, got, want)
	}
	c, err := net.DialTimeout("tcp", ps.Listen(0), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s, err := roundTrip(c, bufio.NewReader(c), 2*time.Second); err != nil || s != "ping\n" {
		t.Fatalf("%q, %v", s, err)
	}
	<-lines
	if err := ps.Redirect(1, up); err == nil {
		t.Fatal("Redirect of a proxy that does not exist succeeded")
	}
}
