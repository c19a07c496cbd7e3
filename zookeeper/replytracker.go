package zookeeper

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// tracker watches the bytes of the connections that a Locker's own zk.Conn
// dials, to know two things go-zookeeper does not expose:
//
//   - lastAck: the local send time of the newest request (a ping included)
//     whose reply has been read. The server received that request no earlier
//     than it was sent, and a server expires a session only after hearing
//     nothing from the client for the session timeout, so the session is
//     alive until at least lastAck + timeout (server clock). Watch
//     notifications do not count: they prove nothing about what the server
//     heard from us.
//   - timeout: the session timeout the server negotiated (it clamps the
//     requested one to [2, 20] × tickTime), read from the connect response.
type tracker struct {
	base    time.Time    // monotonic origin of lastAck
	lastAck atomic.Int64 // ns since base
	timeout atomic.Int64 // negotiated session timeout in ns; 0 until known
	dials   atomic.Int64 // connections made (tests)
	sent    atomic.Int64 // requests written, pings and connects aside (tests count round trips)
	refused error        // set before the first dial: dial refuses to connect

	mu  sync.Mutex
	cur *trackedConn // the newest connection (tests cut it)
}

func newTracker() *tracker { return &tracker{base: time.Now()} }

// dialer returns a zk.Dialer (by shape) that wraps each connection.
func (t *tracker) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	if t.refused != nil {
		return nil, t.refused
	}
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: t, pending: make(map[int32][]int64)}
	t.mu.Lock()
	t.cur = tc
	t.mu.Unlock()
	t.dials.Add(1)
	return tc, nil
}

// current returns the newest connection (nil before the first dial).
func (t *tracker) current() *trackedConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}

// ackedAt returns the send time of the newest acknowledged request, or the
// zero time before the first one.
func (t *tracker) ackedAt() time.Time {
	ns := t.lastAck.Load()
	if ns == 0 {
		return time.Time{}
	}
	return t.base.Add(time.Duration(ns))
}

func (t *tracker) negotiated() time.Duration { return time.Duration(t.timeout.Load()) }

// cut closes the current connection (go-zookeeper reconnects, keeping the
// session). Used by tests as a fault.
func (t *tracker) cut() {
	t.mu.Lock()
	c := t.cur
	t.mu.Unlock()
	if c != nil {
		_ = c.Conn.Close()
	}
}

// trackedConn parses ZooKeeper's framing: every packet is a 4-byte length
// and a body. go-zookeeper writes each request with one Write; the first
// packet each way is the connect request/response, then request bodies start
// with xid and opcode, reply bodies with xid, zxid and err. Replies come in
// request order; pings use xid -2, notifications xid -1.
type trackedConn struct {
	net.Conn
	t *tracker

	wmu     sync.Mutex
	wrote   bool              // the connect request went out
	connAt  int64             // its send time
	pending map[int32][]int64 // xid -> send times (FIFO), guarded by wmu

	// Read side: only go-zookeeper's receive goroutine reads.
	got     bool // the connect response was parsed
	head    [24]byte
	headN   int // bytes of head filled
	headLen int // bytes of head wanted for this packet
	remain  int // body bytes left to skip after head
}

func (c *trackedConn) Write(b []byte) (int, error) {
	now := time.Since(c.t.base).Nanoseconds()
	c.wmu.Lock()
	if !c.wrote {
		c.wrote, c.connAt = true, now
	} else if len(b) >= 8 {
		xid := int32(binary.BigEndian.Uint32(b[4:8]))
		c.pending[xid] = append(c.pending[xid], now)
		if xid >= 0 {
			c.t.sent.Add(1)
		}
	}
	c.wmu.Unlock()
	return c.Conn.Write(b)
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.scan(b[:n])
	return n, err
}

func (c *trackedConn) scan(p []byte) {
	for len(p) > 0 {
		if c.headLen == 0 { // start of a packet: read its length first
			c.headLen = 4
		}
		if c.headN < c.headLen {
			k := copy(c.head[c.headN:c.headLen], p)
			c.headN += k
			p = p[k:]
			if c.headN < c.headLen {
				return
			}
			if c.headLen == 4 {
				size := int(binary.BigEndian.Uint32(c.head[:4]))
				want := 4 // reply: xid
				if !c.got {
					want = 16 // connect response: protocolVersion, timeOut, sessionId
				}
				want = min(want, size)
				c.headLen = 4 + want
				c.remain = size - want
				if want > 0 {
					continue
				}
			}
			c.packet()
		}
		k := min(c.remain, len(p))
		c.remain -= k
		p = p[k:]
		if c.remain == 0 {
			c.headN, c.headLen = 0, 0
		}
	}
}

// packet handles the parsed head of one packet.
func (c *trackedConn) packet() {
	body := c.head[4:c.headLen]
	if !c.got {
		c.got = true
		if len(body) < 16 || binary.BigEndian.Uint64(body[8:16]) == 0 {
			return // no session (expired): nothing was acknowledged
		}
		if t := fromMillis(int32(binary.BigEndian.Uint32(body[4:8]))); t > 0 {
			c.t.timeout.Store(int64(t))
		}
		c.wmu.Lock()
		sent := c.connAt
		c.wmu.Unlock()
		c.ack(sent)
		return
	}
	if len(body) < 4 {
		return
	}
	xid := int32(binary.BigEndian.Uint32(body[:4]))
	if xid == -1 { // watch notification
		return
	}
	c.wmu.Lock()
	q := c.pending[xid]
	var sent int64
	if len(q) > 0 {
		sent = q[0]
		if len(q) == 1 {
			delete(c.pending, xid)
		} else {
			c.pending[xid] = q[1:]
		}
	}
	c.wmu.Unlock()
	if sent > 0 {
		c.ack(sent)
	}
}

func (c *trackedConn) ack(sent int64) {
	for {
		old := c.t.lastAck.Load()
		if sent <= old || c.t.lastAck.CompareAndSwap(old, sent) {
			return
		}
	}
}
