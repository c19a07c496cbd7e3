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
