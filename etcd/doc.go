// Package etcd is dlock's etcd driver, on the official client
// go.etcd.io/etcd/client/v3 (v3.5, which speaks to etcd 3.4 and later
// servers).
//
// It is a module of its own, github.com/dlock-go/dlock/etcd: the etcd
// client brings grpc, protobuf and zap, which applications that use
// another backend should not have to download or link. Import it to
// register its schemes:
//
//	import _ "github.com/dlock-go/dlock/etcd"
//
// # URLs
//
//	etcd://host1:2379,host2:2379,host3:2379/prefix?dial_timeout=5s
//	etcds://user:password@host1:2379/prefix?skip_verify=false
//
// opens one etcd client to the members listed (port 2379 when omitted;
// the client keeps to these endpoints and does not learn others) and keeps
// every lock under the key prefix (the URL's path, default /dlock; a
// trailing '/' is dropped). etcds:// speaks TLS to every member, verifying
// their certificates against the system roots for the first host's name.
// user:password@ authenticates with etcd's user authentication; the
// password never appears in an error or a log line. Parameters (unknown
// ones are an error):
//
//   - dial_timeout (default 5s): how long the client waits for a
//     connection before a call fails.
//   - skip_verify (etcds:// only, default false): do not verify the
//     members' certificates (tests only).
//
// OpenLocker uses a *clientv3.Client that you opened (and that Close
// leaves open).
//
// # Keys
//
// Each attempt to acquire a name is one key, under an etcd lease of its
// own whose TTL is the lease's (rounded up to whole seconds, plus one
// from 10s up: see below):
//
//	<prefix>/<escaped name>/<etcd lease id>-<grant tag>   value: the Owner of the request
//
// A semaphore's attempts queue apart from the lock of the same name:
//
//	<prefix>/<escaped name>%sem/<etcd lease id>-<grant tag>   value: "<N>\n<Owner>"
//
// Both are 16 hex digits. The grant tag, random, drawn when the Locker
// granted the etcd lease, makes the name that grant's own: an etcd lease
// id is unique only among live leases (the server may issue an expired
// lease's id again, and a client may name the id it grants). The
// successive attempts of one etcd lease (a spare, see Guarantees) reuse
// the name, so that the server's index, which keeps a deleted key until
// a compaction, does not grow by a key per lock use.
//
// The escaped name is the name with '%' and '/' percent-escaped (%25,
// %2F), so that the keys of two names never share a prefix; any other
// byte stands for itself. Nothing else is ever written: a released,
// abandoned or expired attempt leaves no key behind (its key is deleted,
// or goes with its revoked or expired lease).
//
// # Guarantees
//
// The recipe is etcd's own concurrency.Mutex, with an etcd lease per dlock
// lease and the re-check Jepsen found missing in etcd 3.4.3's mutex:
//
//   - An attempt takes an etcd lease with the TTL and creates its key in
//     one transaction that also reads the queue's newest keys (its own,
//     its predecessor, the key with the greatest create revision below
//     its own, and up to 7 more below) and their count; it holds the lock
//     when there is no predecessor: its key is the lowest. TryAcquire deletes its
//     key at once when it does not. The etcd lease is a spare when the
//     Locker has one: a lease of the same TTL whose key an earlier release
//     deleted, kept alive without keys for the next acquisition (at most 8
//     per TTL, each for 30s unused) and renewed in the same round trip as
//     the transaction, so that the server holds it a whole TTL from the
//     acquisition's start; otherwise the attempt grants one first. From a
//     TTL of 10s up, the etcd lease lasts a second more than the TTL, and
//     a spare renewed less than 0.9s ago is not renewed again: the server
//     holds it a whole TTL from the acquisition's start already. A lease
//     is never shared: one that nobody refreshes expires after its TTL
//     whatever the Locker's other leases do (concurrency.Mutex shares one
//     session lease between every lock, which a lease without keep-alive
//     cannot).
//   - Waiters (Acquire) queue in create-revision order (Capabilities.Fair).
//     A waiter with at most 8 keys ahead, all read by the transaction that
//     created its key, watches their deletes and its own key's on its
//     Locker's watch of the whole queue, which the Locker keeps for 1s
//     after its last wait so that the next wait creates none (etcd 3.4
//     sends the events of a watch whose creation raced a write only at
//     its next 100ms catch-up): the delete that leaves none of
//     them, with its own key not deleted up to it, proves the grant at
//     that revision without a read (none can be created below a key
//     later), so a handoff's critical path is the release's write and the
//     event; the price is that a release reaches each of those waiters,
//     not only the next, and the Lockers that waited in the last second.
//     Another waiter watches only its predecessor, so that a release
//     reaches one waiter. The watches go over one watch
//     stream per Locker; one starts at the server's current revision, and
//     when that is later than the read that saw the keys, a read after
//     the watch's start finds a delete in between. While it waits, a
//     waiter renews its etcd lease every third of the TTL.
//   - After waiting, the grant renews the etcd lease (a lease that expired
//     while its owner waited fails here, and the attempt queues again with
//     a new lease; one that expired or was revoked deletes the key, which a
//     waiter that watches its own key sees at once) and, unless the watch
//     proved it, checks, in one transaction, that its key still
//     exists with its create revision and is the lowest of the queue. After
//     the predecessor's delete, the member that answers serves that check
//     from what it has applied, taken only at the delete's revision or
//     later (none can be created below a key later, and the renewal proves
//     the lease alive), so no quorum read is on a handoff's path. The
//     lease's local deadline counts from the start of that renewal. A
//     waiter whose etcd lease has the extra second and was renewed less
//     than 0.9s ago skips the renewal: its key, still there, proves the
//     lease alive, and the server holds it a whole TTL from the grant.
//   - The fencing token is the create revision of the holder's key: etcd's
//     global revision, which never goes back (across restarts, compactions
//     and leader changes), so tokens of successive holders strictly
//     increase. With --unsafe-no-fsync a crash of every member may lose
//     acknowledged writes, and with them revisions already handed out.
//   - Renewals go over one keep-alive stream per Locker. Refresh renews the
//     etcd lease and checks that the key is still there; a lease the server
//     dropped is ErrNotHeld. The refreshes of a Locker's leases that come
//     within a 200th of the TTL (at most 20ms) of each other go together:
//     their renewals in one write on the stream, the reads of their keys
//     in one read-only transaction, in flight together; a refresh's
//     renewal counts from the batch's send. A watch on the holder's key, from 100ms after
//     the grant, reports a loss (its deletion) at once, before the next
//     renewal would.
//   - Release deletes the key (a plain delete, as concurrency.Mutex's:
//     the key's name is its etcd lease grant's alone, and that lease's
//     attempts come one at a time, so another owner's key, even under a
//     reissued etcd lease id, has another name and is never touched),
//     then keeps the etcd lease as a spare. A delete that finds no key
//     leaves the lease id alone (it may be another client's by then); one
//     whose outcome is unknown is tried again in the background, and the
//     lease, not reused, is revoked.
//   - A cancelled Acquire deletes its key (or, when the key's state is
//     unknown, revokes its etcd lease, which deletes it) with a fresh
//     context bounded to 5s. A holder that dies frees the lock when
//     its etcd lease expires: the TTL after its last renewal, rounded up to
//     whole seconds, plus up to 500ms (the server's lessor looks for
//     expired leases twice a second), and up to one more second from a TTL
//     of 10s up. A leader change renews every lease on
//     the server, which may keep a dead holder's lock longer.
//
// # Semaphores
//
// A counting semaphore of N permits (Locker.Semaphore) queues as a lock
// does, with the same etcd leases, spares, keep-alive, re-check after
// waiting, release and clean-up; the N lowest create revisions hold a
// permit, granted in arrival order (Capabilities.SemaphoreFair). The token
// is the key's create revision: a permit granted after another's Acquire
// returned has a greater one; two waiters granted by releases close
// together may learn of their grants in either order.
//
// The transaction that creates an attempt's key reads the whole queue
// with its values, which carry each attempt's N. An attempt that finds a
// key ahead of its own with another N deletes its key and is refused
// (ErrInvalidOption): every key ahead counts, not only the holders', so
// two admitted keys with different N never exist at once. Clients that
// disagree on N while their attempts overlap may all be refused; once the
// queue is empty the next attempt's N applies. MaxPermits (256) bounds
// what that read returns.
//
// A waiter opens one watch on the queue's prefix, reads the keys ahead of
// its own once the watch is confirmed, and counts their deletions; when
// fewer than N are left it renews its etcd lease and checks, in one
// transaction, that its key is still there and among the N lowest. Every
// deletion reaches every waiter of the semaphore, but costs a round trip
// only to a waiter it may admit.
//
// etcd refuses leases shorter than 1.5 × its election timeout (2s with the
// default 1s), so the driver declares MinTTL 2s: the portable layer refuses
// shorter TTLs rather than let the server lengthen them silently.
package etcd
