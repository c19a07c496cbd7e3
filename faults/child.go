package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/childproc"
)

// Environment of a client process. The parent sets them; the client's own
// clock is used only for durations (never compared with the parent's).
const (
	envChild   = "DLOCK_FAULTS_CHILD" // the client id; set means "be a client"
	envURL     = "DLOCK_FAULTS_URL"
	envName    = "DLOCK_FAULTS_NAME"
	envTTL     = "DLOCK_FAULTS_TTL"
	envTimeout = "DLOCK_FAULTS_ACQUIRE_TIMEOUT"
	envPermits = "DLOCK_FAULTS_PERMITS" // > 0: take permits of a semaphore
)

// msg is one line of the protocol between a client process and the parent
// (JSON, one per line, over internal/childproc's channel).
//
// Client to parent:
//   - call: about to call op (acquire, release); the client waits for go
//     (or stop) before calling, so the parent's receive time is at or
//     before the call and the parent can inject a fault into it;
//   - ret: op returned (OK, Token, Err, Kind);
//   - write: write Token to the fenced register; the parent answers wr;
//   - done: the lease's Done closed: Err, and on the client's monotonic
//     clock the offsets from the acquire's call line to Done closing
//     (DoneNS) and to the lease's last local deadline (DeadlineNS, -1
//     for session-bound leases). A successful acquire's ret carries AtNS,
//     the offset from the call to sending ret, which lets the parent
//     place the call on its own clock no earlier than it happened.
//
// Parent to client: go, stop, wr (OK).
type msg struct {
	K          string `json:"k"`
	Op         string `json:"op,omitempty"`
	Lease      int    `json:"lease,omitempty"`
	OK         bool   `json:"ok,omitempty"`
	Token      uint64 `json:"token,omitempty"`
	Err        string `json:"err,omitempty"`
	Kind       string `json:"kind,omitempty"`
	DoneNS     int64  `json:"done_ns,omitempty"`
	DeadlineNS int64  `json:"deadline_ns,omitempty"`
	AtNS       int64  `json:"at_ns,omitempty"`
}

// Error kinds reported by clients.
const (
	kindNotAcquired = "not-acquired"
	kindNotHeld     = "not-held"
	kindLost        = "lost"
	kindReleased    = "released"
	kindTimeout     = "timeout"
	kindOther       = "other"
)

func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, dlock.ErrNotAcquired):
		return kindNotAcquired
	case errors.Is(err, dlock.ErrNotHeld):
		return kindNotHeld
	case errors.Is(err, dlock.ErrLockLost):
		return kindLost
	case errors.Is(err, dlock.ErrReleased):
		return kindReleased
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kindTimeout
	}
	return kindOther
}

// ChildMain returns at once unless this process was started by Run as a
// client process; then it runs the client loop and exits. Call it first in
// TestMain (or main) of every binary that calls Run.
func ChildMain() {
	childproc.Serve(envChild, func(id string, parent *childproc.Parent) int {
		if err := runChild(id, &childConn{parent}); err != nil {
			fmt.Fprintln(os.Stderr, "faults client:", err)
			return 2
		}
		return 0
	})
}

type childConn struct{ parent *childproc.Parent }

func (c *childConn) send(m msg) error { return c.parent.SendJSON(m) }

// ask sends m and reads the parent's answer (only the main loop asks).
func (c *childConn) ask(m msg) (msg, error) {
	if err := c.send(m); err != nil {
		return msg{}, err
	}
	var r msg
	err := c.parent.RecvJSON(&r)
	if errors.Is(err, io.EOF) {
		err = errors.New("parent closed the pipe")
	}
	return r, err
}

func runChild(idEnv string, c *childConn) error {
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		return fmt.Errorf("bad %s: %w", envTTL, err)
	}
	acqTimeout, err := time.ParseDuration(os.Getenv(envTimeout))
	if err != nil {
		return fmt.Errorf("bad %s: %w", envTimeout, err)
	}
	id, _ := strconv.Atoi(idEnv)
	name := os.Getenv(envName)
	permits, _ := strconv.Atoi(os.Getenv(envPermits))

	ctx := context.Background()
	var l *dlock.Locker
	for {
		octx, cancel := context.WithTimeout(ctx, acqTimeout)
		l, err = dlock.Open(octx, os.Getenv(envURL))
		cancel()
		if err == nil {
			break
		}
		// The server may be down (a restart fault): keep trying, unless
		// the parent asks us to stop.
		fmt.Fprintln(os.Stderr, "faults client: open:", err)
		r, err := c.ask(msg{K: "call", Op: "open"})
		if err != nil {
			return err
		}
		if r.K == "stop" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer l.Close()
	acquire := func(ctx context.Context, opts *dlock.AcquireOptions) (*dlock.Lease, error) {
		return l.Acquire(ctx, name, opts)
	}
	if permits > 0 {
		sem, err := l.Semaphore(name, permits)
		if err != nil {
			return err
		}
		acquire = sem.Acquire
	}

	rnd := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	for seq := 1; ; seq++ {
		r, err := c.ask(msg{K: "call", Op: "acquire"})
		if err != nil {
			return err
		}
		if r.K == "stop" {
			return nil
		}
		called := time.Now()
		actx, cancel := context.WithTimeout(ctx, acqTimeout)
		lease, err := acquire(actx, &dlock.AcquireOptions{TTL: ttl})
		cancel()
		if err != nil {
			if err := c.send(msg{K: "ret", Op: "acquire", Err: err.Error(), Kind: errKind(err)}); err != nil {
				return err
			}
			time.Sleep(time.Duration(rnd.Int64N(int64(ttl / 10))))
			continue
		}
		if err := c.send(msg{K: "ret", Op: "acquire", OK: true, Token: lease.Token(), Lease: seq, AtNS: time.Since(called).Nanoseconds()}); err != nil {
			return err
		}
		watchDone(c, lease, seq, called)

		// Use the lock: write with the token, hold, write again, release.
		// Each write happens only while Done is still open, as a careful
		// application would; the register decides the rest.
		if err := childWrite(c, lease, seq); err != nil {
			return err
		}
		hold := time.Duration(rnd.Int64N(int64(2*ttl) + 1))
		select {
		case <-time.After(hold):
		case <-lease.Done():
		}
		if err := childWrite(c, lease, seq); err != nil {
			return err
		}
		r, err = c.ask(msg{K: "call", Op: "release", Lease: seq})
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, acqTimeout)
		err = lease.Release(rctx)
		cancel()
		m := msg{K: "ret", Op: "release", Lease: seq, OK: err == nil, Token: lease.Token()}
		if err != nil {
			m.Err, m.Kind = err.Error(), errKind(err)
		}
		if err := c.send(m); err != nil {
			return err
		}
		_ = r // the parent always answers go to a release
	}
}

func childWrite(c *childConn, lease *dlock.Lease, seq int) error {
	select {
	case <-lease.Done():
		return nil
	default:
	}
	if lease.Err() != nil {
		return nil
	}
	_, err := c.ask(msg{K: "write", Lease: seq, Token: lease.Token()})
	return err
}

// watchDone reports when lease's Done closes, with the offsets (on this
// process's monotonic clock) from the acquire's call line.
func watchDone(c *childConn, lease *dlock.Lease, seq int, called time.Time) {
	go func() {
		<-lease.Done()
		now := time.Now()
		m := msg{K: "done", Lease: seq, Token: lease.Token(), DoneNS: now.Sub(called).Nanoseconds(), DeadlineNS: -1}
		if dl, ok := lease.Deadline(); ok {
			m.DeadlineNS = dl.Sub(called).Nanoseconds()
		}
		if err := lease.Err(); err != nil {
			m.Err, m.Kind = err.Error(), errKind(err)
		}
		_ = c.send(m)
	}()
}
