package zookeeper

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// session follows the liveness of a Locker's ZooKeeper session and ends
// (closes Lost of) the leases that may have outlived it:
//
//   - at once when the session expired (StateExpired, or a new session id);
//   - when the server may have expired it: with the Locker's own connection,
//     at lastAck + timeout − margin, where lastAck is the send time of the
//     newest request (pings included) whose reply was read (see tracker);
//     with a user's connection, timeout/3 − margin after the connection was
//     seen down (go-zookeeper notices silence 2/3 of the timeout after the
//     last packet), or at once when the timeout is unknown.
//
// One goroutine (run) per Locker does this for all its leases.
type session struct {
	conn    *zk.Conn
	tr      *tracker        // nil for a user's connection
	timeout time.Duration   // requested or given; 0: unknown
	events  <-chan zk.Event // a user's event channel, or nil
	janitor func(orphan)    // deletes a node a lost lease may have left

	wake chan struct{} // cap 1: state changed

	testMargin atomic.Int64 // tests only: a larger loss margin

	mu        sync.Mutex
	leases    map[*lease]struct{}
	watches   map[string]*pathWatch // paths whose events onEvent counts
	sid       int64                 // session id last seen established
	downSince time.Time             // user's connection: when it was first seen down
	ended     bool                  // closeAll was called
	nextCheck time.Time             // when run checks next
}

// pollEvery is how often the session state is polled when no event
// channel tells of changes (a backstop with the Locker's own connection).
const (
	pollUser = 50 * time.Millisecond
	pollOwn  = 500 * time.Millisecond
)

func newSession(conn *zk.Conn, tr *tracker, timeout time.Duration, events <-chan zk.Event) *session {
	if tr != nil {
		// A timeout go-zookeeper would wrap: never dial (waitSession
		// returns the error at once).
		tr.refused = checkSessionTimeout(timeout)
	}
	return &session{conn: conn, tr: tr, timeout: timeout, events: events,
		wake: make(chan struct{}, 1), leases: make(map[*lease]struct{}),
		watches: make(map[string]*pathWatch)}
}

// lossMargin is subtracted from the session timeout: the clock-rate
// difference between client and server (1%, as dlock's drift) plus the
// time it takes to wake up and close Lost.
func lossMargin(timeout time.Duration) time.Duration { return timeout/50 + 5*time.Millisecond }

// sessionTimeout is the timeout the server negotiated when known (the
// Locker's own connection reads it from the connect response), else the
// one given to OpenLocker (documented as the negotiated one). The requested
// timeout is never used for a deadline: the server may have granted less.
func (s *session) sessionTimeout() time.Duration {
	if s.tr != nil {
		if t := s.tr.negotiated(); t > 0 {
			return t
		}
	}
	return s.timeout
}

// assumedMaxSession is what Capabilities.ReleaseOnCrash reports for a
// user's connection whose session timeout was not given: ZooKeeper's
// default maximum (20 × the default tickTime of 2s).
const assumedMaxSession = 40 * time.Second

func (s *session) crashBound() time.Duration {
	if t := s.sessionTimeout(); t > 0 {
		return t
	}
	return assumedMaxSession
}

// onEvent is go-zookeeper's event callback for the Locker's own
// connection. It runs in go-zookeeper's loop and must not block.
// A node event on a watched path (a watch fired on a lease's node, or the
// watches were dropped) counts in the path's fires before go-zookeeper
// reads the next reply (see trackedConn.Read).
func (s *session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		if ev.Path != "" {
			s.mu.Lock()
			if w := s.watches[ev.Path]; w != nil {
				w.fires.Add(1)
			}
			s.mu.Unlock()
		}
		return
	}
	if ev.State == zk.StateExpired {
		s.loseAll(func(*lease) bool { return true }, "zookeeper: session expired")
	}
	s.signal()
}

func (s *session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// waitSession waits until the connection has a session.
func (s *session) waitSession(ctx context.Context, timeout time.Duration) error {
	if s.tr != nil && s.tr.refused != nil {
		return s.tr.refused
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.conn.State() == zk.StateHasSession && s.conn.SessionID() != 0 {
			s.mu.Lock()
			s.sid = s.conn.SessionID()
			s.mu.Unlock()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.wake:
		case <-tick.C:
		}
	}
}

// deadline returns the time after which the session may have expired on
// the server, and false when there is none to fear now.
func (s *session) deadlineLocked() (time.Time, bool) {
	t := s.sessionTimeout()
	if s.tr != nil {
		ack := s.tr.ackedAt()
		if ack.IsZero() {
			return time.Time{}, false
		}
		m := lossMargin(t)
		if extra := time.Duration(s.testMargin.Load()); extra > 0 {
			m = extra // tests: end leases early, while the session lives on
		}
		return ack.Add(t - m), true
	}
	if s.downSince.IsZero() {
		return time.Time{}, false
	}
	if t == 0 {
		return s.downSince, true
	}
	poll := pollUser
	if s.events != nil {
		poll = 0
	}
	return s.downSince.Add(t/3 - poll - lossMargin(t)), true
}

// check brings the state up to date and ends the leases that may have
// outlived their session.
func (s *session) check(now time.Time) {
	state, sid := s.conn.State(), s.conn.SessionID()
	s.mu.Lock()
	if state == zk.StateHasSession && sid != 0 {
		s.downSince = time.Time{}
		if sid != s.sid {
			s.sid = sid
			s.loseLocked(func(ls *lease) bool { return ls.sid != sid }, "zookeeper: session expired (a new session replaced it)")
		}
	} else if s.downSince.IsZero() {
		s.downSince = now
	}
	if state == zk.StateExpired {
		s.loseLocked(func(*lease) bool { return true }, "zookeeper: session expired")
	}
	if dl, ok := s.deadlineLocked(); ok && !now.Before(dl) {
		s.loseLocked(func(*lease) bool { return true }, whyMayExpire)
	}
	s.mu.Unlock()
}

// run is the session's goroutine; it ends when stop is closed.
func (s *session) run(stop <-chan struct{}) {
	poll := pollOwn
	if s.tr == nil {
		poll = pollUser
	}
	timer := time.NewTimer(poll)
	defer timer.Stop()
	events := s.events
	for {
		now := time.Now()
		s.check(now)
		next := poll
		s.mu.Lock()
		if dl, ok := s.deadlineLocked(); ok && len(s.leases) > 0 {
			next = min(next, max(dl.Sub(now), time.Millisecond))
		}
		s.nextCheck = now.Add(next)
		s.mu.Unlock()
		timer.Reset(next)
		select {
		case <-stop:
			return
		case <-s.wake:
		case ev, ok := <-events:
			if !ok {
				events = nil
				break
			}
			if ev.Type == zk.EventSession {
				if ev.State == zk.StateExpired {
					s.loseAll(func(*lease) bool { return true }, "zookeeper: session expired")
				}
				if ev.State == zk.StateDisconnected {
					s.mu.Lock()
					if s.downSince.IsZero() {
						s.downSince = time.Now()
					}
					s.mu.Unlock()
				}
			}
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// register adds a granted lease; it is born lost when its session is
// already gone or may have expired.
func (s *session) register(ls *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended:
		ls.markLost("zookeeper: locker closed")
		return
	case s.conn.SessionID() != ls.sid:
		ls.markLost("zookeeper: session expired")
		return
	}
	if dl, ok := s.deadlineLocked(); ok && !time.Now().Before(dl) {
		s.addLocked(ls)
		s.loseLocked(func(x *lease) bool { return x == ls }, whyMayExpire)
		return
	}
	s.addLocked(ls)
	if dl, ok := s.deadlineLocked(); ok && dl.Before(s.nextCheck) {
		s.signal() // the deadline timer must be armed sooner
	}
}

func (s *session) unregister(ls *lease) {
	s.mu.Lock()
	s.removeLocked(ls)
	s.mu.Unlock()
}

// addLocked registers ls and counts the events on its node's path while
// it is registered (ls.pw, set once here, before the lease is handed out).
func (s *session) addLocked(ls *lease) {
	s.leases[ls] = struct{}{}
	ls.pw = s.watchLocked(ls.path)
}

func (s *session) removeLocked(ls *lease) {
	if _, ok := s.leases[ls]; !ok {
		return
	}
	delete(s.leases, ls)
	s.unwatchLocked(ls.path)
}

// pathWatch counts the events on one path that reached onEvent while
// a lease asked for it.
type pathWatch struct {
	refs  int // guarded by session.mu
	fires atomic.Uint64
}

func (s *session) watchLocked(path string) *pathWatch {
	w := s.watches[path]
	if w == nil {
		w = &pathWatch{}
		s.watches[path] = w
	}
	w.refs++
	return w
}

func (s *session) unwatchLocked(path string) {
	if w := s.watches[path]; w != nil {
		if w.refs--; w.refs == 0 {
			delete(s.watches, path)
		}
	}
}

func (s *session) loseAll(match func(*lease) bool, why string) {
	s.mu.Lock()
	s.loseLocked(match, why)
	s.mu.Unlock()
}

const whyMayExpire = "zookeeper: no reply from the server within the session timeout: the session may have expired"

// loseLocked ends the matching leases. A lease ended while its session may
// still be alive (whyMayExpire) leaves a node behind: the janitor deletes
// it if the session survives.
func (s *session) loseLocked(match func(*lease) bool, why string) {
	for ls := range s.leases {
		if !match(ls) {
			continue
		}
		s.removeLocked(ls)
		if ls.markLost(why) && why == whyMayExpire && s.janitor != nil {
			s.janitor(ls.orphan())
		}
	}
}

func (s *session) closeAll() {
	s.mu.Lock()
	s.ended = true
	for ls := range s.leases {
		s.removeLocked(ls)
		ls.markLost("zookeeper: locker closed")
	}
	s.mu.Unlock()
}
