// Package zookeeper is dlock's ZooKeeper driver.
//
// # URLs
//
//	zk://host1:2181,host2:2181,host3:2181/prefix?session_timeout=10s
//
// opens a ZooKeeper session to the ensemble (hosts in any order, port
// 2181 when omitted; a busy Locker opens more, see sessions below) and keeps every lock under the znode prefix (default
// /dlock; created as persistent nodes on first use; it must not be the root
// or under /zookeeper). Parameters (unknown ones are an error):
//
//   - session_timeout (default 10s, at least 100ms, at most
//     MaxSessionTimeout, about 596h31m: the protocol carries it as an int32
//     of milliseconds, and a longer one is refused rather than wrapped): the
//     requested session timeout. The server clamps it to its
//     [minSessionTimeout, maxSessionTimeout] (by default [2, 20] ×
//     tickTime); only the negotiated value, read from the server's connect
//     response, is used: for Capabilities.ReleaseOnCrash and for loss
//     detection (below). Asking for more than the server's maximum gets the
//     maximum.
//   - recipe=fair|basic (default fair): the locking recipe (below).
//   - connect_timeout (default 10s): how long Open waits for a session.
//   - sessions (default 4, from 1 to 16): the most sessions the Locker
//     spreads its names over. It opens the others, in the background and
//     once, when 8 of its attempts are sending requests at once (attempts
//     waiting for a lock do not count), because a server reads a
//     connection's requests one at a time: one session held 32 goroutines
//     cycling over 10 000 names to 0.5–0.65 × the rate of a connection per
//     goroutine, 4 sessions to 0.9. A name's attempts go to the session a
//     hash of the name picks; each session is one more client connection
//     (mind the server's maxClientCnxns, 60 per client address by
//     default). sessions=1 keeps one.
//
// zk://user:password@host/prefix authenticates with ZooKeeper's digest
// scheme (addAuth digest user:password) and creates every node with the
// ACL "auth" (only that identity can read or delete them), missing prefix
// elements included: create the prefix beforehand with the ACL you want
// when several identities share it. The password never appears in an
// error.
//
// OpenLocker uses a *zk.Conn that you opened (and that Close leaves open).
//
// # Keys
//
// The nodes of a lock name live under its parent, /prefix/<escaped name>:
//
//	/prefix                                           persistent, created on first use
//	/prefix/<escaped name>                            the parent: a container node (fair) or persistent (basic)
//	/prefix/<escaped name>/_c_<GUID>-lock-<sequence>  fair: one EPHEMERAL_SEQUENTIAL node per attempt; data: the owner
//	/prefix/<escaped name>/lock                       basic: the one EPHEMERAL lock node; data: "<GUID>\n<owner>"
//	/prefix/<escaped name>%sem                        a semaphore's parent: a container node
//	/prefix/<escaped name>%sem/_c_<GUID>-sem<N>-<sequence>  one EPHEMERAL_SEQUENTIAL node per permit attempt; data: the owner
//
// A semaphore's parent is a sibling of the lock parents, apart from them:
// no escaped lock name contains "%s" (the escapes below write '%' only
// before two upper-case hex digits), so the semaphore "x" and the lock "x"
// never share a node.
//
// Every grant also writes the parent (a setData in the create's multi),
// so its mzxid and data version change with each grant; nothing is ever
// written elsewhere. The server deletes a fair parent once it is empty;
// a basic parent stays (one small node per name ever locked).
//
// A lock name becomes one znode name: '%', '/' and every code point
// ZooKeeper refuses in a path (U+0000–U+001F, U+007F–U+009F,
// U+D800–U+F8FF, U+FFF0 and above, which includes everything outside the
// Basic Multilingual Plane) are percent-escaped byte by byte, and the names
// "." and ".." become "%2E" and "%2E%2E". The mapping is injective, so
// distinct names never share a lock, and any UTF-8 name up to dlock's 1024
// bytes fits.
//
// # The fair recipe
//
// Each acquisition creates an EPHEMERAL_SEQUENTIAL child of
// /prefix/<escaped name>; the lowest sequence number holds the lock and the
// others queue behind it in arrival order (Capabilities.Fair). Each waiter
// watches the node just ahead of it, and the one ahead of that; a release
// wakes at most those two, never the herd. The next in line is granted on
// the deletion event itself, without a further round trip (nodes ahead of
// a waiter can only leave, never arrive, so when the last one it knew of is
// gone it is first); the one after it lists the queue again while the new
// holder works, so that its own turn comes without a round trip too.
//
// Children have protected names, "_c_<GUID>-lock-<sequence>" with a GUID
// per attempt: when the connection is lost after the server applied a
// create but before its reply arrived, the retry lists the children, finds
// its GUID and carries on with that node instead of leaving an orphan that
// would block everybody until the session ends.
//
// An uncontended Acquire costs one round trip: the create is a multi that
// also touches the parent (setData), and its reply carries both the token
// (the parent's mzxid, which is the new node's czxid) and the parent's
// child count: a node alone in the transaction that created it is the
// lowest, and every later one will be higher, so no listing is needed.
// Release is one delete. The lease's watch on its node (which reports a
// revocation) is set 1ms after an uncontended grant, so a short critical
// section costs no watch at all. Only a contended Acquire lists the queue:
// its wait starts with one pipelined batch of getData-with-watch requests
// (its own node, the one ahead, the one ahead of that). A TryAcquire that
// finds the lock held deletes its node again before it returns
// ErrNotAcquired. A cancelled or failed Acquire deletes its node with a
// fresh bounded context in the background: Acquire returns within a few
// tens of milliseconds of its ctx's end even when the server does not
// answer (a frozen server, a stalled network); Close waits for clean-ups
// in flight. What cannot be deleted within the bound (5s) is handed to a
// janitor that retries while the session lives: a create still in flight
// is found by its GUID once the server answers, since a session's requests
// are applied in order.
//
// # Semaphores
//
// A counting semaphore of N permits (Locker.Semaphore) queues as the fair
// recipe does, whatever the recipe parameter (which chooses the locks'):
// each attempt creates an EPHEMERAL_SEQUENTIAL child of the semaphore's
// parent with a protected name, and the N lowest hold a permit, granted in
// arrival order (Capabilities.SemaphoreFair). The token is the permit
// node's czxid: a permit granted after another's Acquire returned has a
// greater one (its node was created later); two waiters granted by
// releases close together may learn of their grants in either order.
// A crashed holder's permit is free when its session expires
// (Capabilities.ReleaseOnCrash), as a lock is.
//
// N is in each node's name ("-sem<N>-"), so the listing that an attempt
// makes anyway shows every queued attempt's N without reading any data.
// An attempt that finds a node ahead of its own with another N is refused
// (ErrInvalidOption) and deletes its node: every node ahead counts, not
// only the holders, which is what makes the rule exact (an admitted node
// looked at every node ahead of it, so two admitted nodes with different
// N never exist at once). Clients that disagree on N while their attempts
// overlap may all be refused. Once no node is left, the next attempt's N
// applies.
//
// A waiter watches the N nodes just ahead of its own. The recipe in which
// it watches only the node N ahead misses wake-ups: with N = 2 and the
// queue [a, b, w], w watches a, and when b goes w is among the 2 lowest
// but gets no event. The window of N nodes cannot miss one: while all of
// them exist, N nodes are ahead; when one goes and fewer than N are left,
// the permit is granted on the deletion event, without a round trip;
// otherwise the waiter lists the queue and watches its new window. A
// release wakes at most the N waiters just behind the freed node. The
// alternative of a child watch per waiter (each lists the queue again at
// every arrival and departure) was measured against it in one process,
// alternating 400ms slices (BenchmarkSemaphoreContended: clients that
// take a permit, hold it 1ms and release it, forceSync=no; medians of 5
// slices each): with 8 clients, N=2: 853 grants/s with the window, 504
// with the child watch, 7.0 against 9.9 requests received by the server
// per grant; 8 clients, N=4: 983 against 684 grants/s, 8.7 against 6.1
// requests (the window's N watches cost more requests when the queue is
// short); 32 clients, N=2: 829 against 320 grants/s, 7.0 against 29.2
// requests and 11 against 56 packets sent per grant. Curator's
// InterProcessSemaphoreV2 takes a lock, lists the leases, creates one
// and releases the lock (five round trips for a free permit, against one
// here when the semaphore is unused and two otherwise: the create, then
// the listing that checks N), and its waiter, holding that lock, keeps a
// child watch on the leases, which every arrival fires.
// MaxPermits (256) bounds the watches a waiter sets and the listing.
// A cancelled Acquire deletes its node as a lock's does.
//
// # The basic recipe
//
// recipe=basic is the naive recipe, kept for comparison: one ephemeral
// node /prefix/<escaped name>/lock; whoever creates it holds the lock, and
// every waiter watches it and tries again when it goes, so each release
// wakes all waiters (the herd effect). Not fair. A name must be locked with
// one recipe only. An uncontended acquire+release sends two requests, the
// grant's multi and the release's; a waiter whose create failed then reads
// the node with a watch (a release in between: it tries again at once).
// Each release costs every waiter a create that fails (each a write
// through the server's write pipeline): that herd, and the round trip of the winner's create after
// the release's event, are what the basic recipe's handoff costs over the
// fair recipe's, which hands over on the event alone.
//
// Each grant is a multi that creates the node and bumps the parent's data
// version; the release is a multi that checks that version and deletes the
// node, so it can never delete a later grant's node. ZooKeeper's data
// version is an int32 that wraps and, after 2^32 writes, reaches -1, which
// a conditional operation reads as "any version". The driver never checks
// against -1: a grant that leaves the parent at -1 bumps it once more (to
// 0) and keeps that as its guard only if nothing else wrote the parent in
// between; a release whose guard no longer matches (someone wrote the
// parent) re-reads the parent and its node and deletes the node only if
// its czxid is still the lease's token.
//
// # Sessions and leases
//
// A lease is its session's ephemeral node: it lasts as long as the session,
// and AcquireOptions.TTL is ignored (Capabilities.SessionBound; the
// keep-alive merely checks that the node still exists in this session).
// While the node's watch, set on the current connection, has not fired,
// that check shares one round trip (a sync) with the Locker's other
// refreshes of the next 50ms: ZooKeeper delivers the watch's event before
// the reply to any later request, so the sync's reply tells as much as an
// exists of each lease's own. Otherwise it is one request of its own.
// Capabilities declares the TTL range it accepts,
// [dlock.MinTTL, MaxSessionTimeout]; a TTL outside it is refused with
// ErrInvalidOption before any server call. A short TTL only makes the
// keep-alive (every TTL/3) check the session more often. If the holder's process dies, the server deletes the
// node when the session expires: Capabilities.ReleaseOnCrash is the
// negotiated session timeout.
//
// Lease.Done closes (with ErrLockLost) when the lease may be gone:
//
//   - at once when the session expired, or the node was deleted (an
//     administrator revoked it);
//   - when the server may expire the session: the Locker records the send
//     time of the newest request whose reply it has read (go-zookeeper
//     pings every third of the session timeout) and ends its leases at that
//     time plus the session timeout minus a margin (2% + 5ms) unless a newer
//     reply came. A disconnection shorter than that keeps the leases, as
//     ZooKeeper keeps the session. A lease lost this way while the session
//     survives has its node deleted in the background.
//
// With OpenLocker, the Locker cannot see the connection's traffic: it ends
// leases Options.SessionTimeout/3 minus the margin after the connection is
// seen down (at once when the timeout is not given). go-zookeeper does not
// expose the negotiated timeout, so Options.SessionTimeout must be it, not
// the one requested: a larger value would report a loss too late. A value
// above MaxSessionTimeout or negative is refused: OpenLocker returns an
// error wrapping ErrInvalidOption.
//
// A waiter whose session expired is never granted: its node is gone, and it
// queues again in the new session.
//
// # Guarantees
//
// At most one session holds a name: every create and delete is committed
// by a quorum of the ensemble before its reply, so a leader change loses
// no grant. A lease lasts as long as its session's node, and Lease.Done
// closes before the server may have expired the session (see Sessions and
// leases); a process paused longer than that can still act on a lease that
// has ended, which the fencing token, checked by the protected resource,
// catches. The fair recipe grants in arrival order (Capabilities.Fair);
// the basic recipe does not. A crashed holder's lock is free once its
// session expires (Capabilities.ReleaseOnCrash, the negotiated session
// timeout).
//
// Lease.Token is the czxid of the lock node: the zxid of the transaction
// that created it. zxids are global to the ensemble and never go back, so
// tokens increase across successive holders (a later holder's node was
// created after the earlier one's: in the fair recipe it is behind it in
// the queue), across server restarts and leader changes
// (TokensSurviveRestart), and across a re-created parent. That is why the
// fair recipe can use container nodes as parents, which the server deletes
// once they are empty: deleting a parent never resets a token. (The basic
// recipe's parents are persistent because its release checks the parent's
// data version, which a re-created node would start again at 0.)
package zookeeper
