// Package redis is dlock's Redis driver, on go-redis v9: locks on one Redis
// server (or a Sentinel-managed primary), on a Redis Cluster, and Redlock
// over independent masters. Import it for its side effect of registering
// its URL schemes with dlock.Open:
//
//	import _ "github.com/dlock-go/dlock/redis"
//
// or call OpenLocker (or OpenRedlock) with go-redis clients of your own.
//
// # URLs
//
//	redis://[user:password@]host[:port][/db][?param=value&...]
//	    one server; port 6379 and database 0 by default
//	rediss://[user:password@]host[:port][/db][?...]
//	    the same over TLS (server name checked against host)
//	redis+cluster://[user:password@]host:port,host:port,...[?...]
//	    a Redis Cluster, reached through any of the seed nodes listed
//	redlock://[user:password@]host:port,host:port,host:port[/db][?...]
//	    Redlock over the listed independent masters (3 or 5; each one a
//	    separate server, not a replica of another)
//
// The password goes in the userinfo only; it never appears in an error.
// Parameters (durations as Go durations, "500ms", "2s", or bare
// milliseconds); any other parameter is an error:
//
//	prefix          key and channel prefix, default "dlock:" (no '{' or '}')
//	dial_timeout    go-redis DialTimeout (default 5s)
//	read_timeout    go-redis ReadTimeout (default 5s)
//	write_timeout   go-redis WriteTimeout (default: read_timeout)
//	pool_timeout    go-redis PoolTimeout (default: read_timeout + 1s)
//	pool_size       connections per server, 1 to 65536 (default 10 per
//	                CPU, at least 64; opened as needed)
//	min_idle_conns  idle connections kept open (default 0)
//	max_retries     retries of a request after a network error, 0 for none
//	                (default 3; Redlock: none, a retry rarely fits the
//	                node timeout)
//	client_name     CLIENT SETNAME of every connection
//	tls             redis+cluster:// and redlock:// only: "true" for TLS
//	skip_verify     with TLS only: "true" skips the certificate check
//	node_timeout    redlock:// only: budget of one request to one node
//	                (default 100ms; capped by the lease's validity)
//
// For example:
//
//	dlock.Open(ctx, "redis://127.0.0.1:6379/0")
//	    → a *goredis.Client on db 0; lock "orders/42" is key dlock:{orders/42}
//	dlock.Open(ctx, "rediss://app:secret@cache.internal:6380/2?prefix=billing:")
//	    → TLS, ACL user app, db 2, key billing:{orders/42}
//	dlock.Open(ctx, "redis+cluster://10.0.0.1:7000,10.0.0.2:7000?read_timeout=1s")
//	    → a *goredis.ClusterClient seeded with two nodes
//	dlock.Open(ctx, "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379?node_timeout=20ms")
//	    → Redlock, quorum 2 of 3, 20ms per node and request
//
// # Guarantees
//
// Single server and Cluster ("set-nx", "cluster"): fencing tokens strictly
// increase for as long as the fence key lives: across a restart only when
// the server persists every write (appendonly yes, appendfsync always; so
// Capabilities does not claim TokensSurviveRestart); a server with an
// allkeys-* eviction policy, which may evict the counter, is refused. Replication is
// asynchronous: a failover to a replica that had not received a grant
// can grant the lock again; check the token at the protected resource.
// Waiters are served in arrival order (Fair is true) from a FIFO queue on
// the server (see Waiting below); a TryAcquire, which does not queue, can
// take a lock whose holder expired without a release before the head
// waiter's next renewal does. A crashed holder's lock is free after its
// TTL, and passes to the head waiter within one renewal period after
// that. Cluster uses SSUBSCRIBE/SPUBLISH on Redis 7 and later,
// SUBSCRIBE/PUBLISH before.
//
// Redlock ("redlock"): waiters are woken, not granted (a quorum of
// independent queues has no safe simple design: each node would grant a
// different waiter); see Waiting. A grant needs a quorum of N/2+1 nodes, asked in
// parallel with a per-node timeout (each request on a goroutine the Locker
// keeps for its node calls, so that no request pays for a new goroutine's
// stack); its validity is TTL − elapsed −
// (1% of TTL + 2ms), which is the portable layer's lease deadline
// measured from the start of the request. A failed attempt takes its key
// back on every node. A node that does not answer within node_timeout
// has not voted: an attempt without a quorum reports ErrNotAcquired
// (Acquire retries) unless a quorum of nodes failed outright (refused
// connections, errors), which is an error. Concurrent attempts can split
// the votes so that no one wins; they retry after a random delay. Redlock offers no fencing
// (Capabilities.Fencing is false): each node counts on its own, and the
// token (the largest count of the granting quorum) can go backwards when
// quorums differ or a node restarts without persistence. Its safety rests
// on bounded clock drift, on process pauses shorter than the validity,
// and on a node restarted without persistence staying down for one TTL.
//
// TTLs: Capabilities declare [dlock.MinTTL, MaxTTL] for every deployment. MaxTTL
// is the largest whole number of milliseconds a time.Duration holds (about
// 292 years): SET PX and PEXPIRE take a positive 64-bit millisecond count
// that the server adds to its clock, far inside that range. A TTL is sent
// in milliseconds rounded up (1.5ms is 2ms, never 1ms), without overflow;
// a PTTL read back saturates instead of wrapping. Redlock's validity,
// TTL − elapsed − (1% of TTL + 2ms), cannot overflow within the range.
//
// Eviction: a server whose maxmemory-policy is allkeys-lru, allkeys-lfu or
// allkeys-random is refused with dlock.ErrInvalidOption before the first
// lock is written to it (each server, each Cluster master and each Redlock
// node is asked once with CONFIG GET): it may evict a held lock's key,
// letting a second owner in, and the fence counter, so that tokens start
// again at 1 and the fenced resource no longer protects anything. The
// volatile-* policies are accepted: they never evict the fence counter
// (it has no TTL), but they can evict a lock key (which has one) under
// memory pressure; the holder then learns of the loss at its next refresh
// (within a third of the TTL with keep-alive) while another owner may
// already hold the lock, whose higher token the resource accepts instead.
// Use noeviction (the default) for lock servers, or give them memory
// headroom. A server that refuses CONFIG (rename-command, an ACL without
// +config|get) cannot be checked and is accepted, as is a server that
// does not answer until it does; a policy changed after the check is not
// seen.
//
// Cancellation: when an acquire fails or its ctx ends, the driver takes back what the
// request may have set (its reply may be lost, or the request may still
// sit in a hung server's socket buffer) with a fresh context bounded to
// 2s, in the background: the call returns as soon as its ctx ends, and
// Close waits for every clean-up. The take-back runs a second time 50ms
// after the first when the first found nothing, so that a request the
// server runs late is still undone.
//
// # Keys
//
// A lock name is stored in a hash tag, so that in a Cluster its keys and
// channels share a slot: <prefix>{<name>} holds the owner value with the lease's PX
// expiry, <prefix>{<name>}:fence the fencing counter (INCR, no expiry: one
// small key per name ever locked); on a single server or a Cluster
// <prefix>{<name>}:w and <prefix>{<name>}:wd, the grant queue (only while
// some waiter waits), and <prefix>g:<id> the channel on which Locker <id>
// receives its grants (in a Cluster with sharded pub/sub,
// <prefix>{<tag>}g:<id>, one per slot, <tag> a short string of the
// name's slot); with Redlock <prefix>{<name>}:q, the queue of Lockers
// waiting (only while some wait), and <prefix>{<name>}:rel:<id>, the
// channel on which a release wakes the Locker with that id. A '}' in the
// name is written %7D and a '%' %25, so any UTF-8 name of up to 1024 bytes
// works. A semaphore's keys and channels are <prefix>{<name>}:s...
// (see Semaphores).
//
// The scripts: Acquire is one round trip, a Lua script (EVALSHA, falling back to EVAL
// after a restart) does SET key value NX PX ttl and, when that succeeds,
// INCR of the fence counter, returning the token; when the lock is held it
// returns the holder's PTTL, so a waiter never sleeps past the holder's
// expiry. The value is unique per grant: a random prefix drawn once per
// Locker (130 bits from crypto/rand, so no two Lockers share it, in one
// process or across restarts) and a counter, followed by "|" and the
// AcquireOptions.Owner (reported by Inspect). Refresh (PEXPIRE) and
// release (hand the lock to the next waiter, or DEL) are scripts that act
// only if the key still holds the grant's value: a release never frees
// another owner's lock and a refresh never re-creates an expired one. A
// free lock costs the acquire script SET and INCR (a blocking Acquire's
// also an EXISTS of the grant queue), and the release GET, EXISTS and
// DEL; with no waiter queued, nothing is published.
//
// # Waiting
//
// Single server and Cluster: a server-side FIFO grant queue, so that a
// release hands the lock over in one round trip. A blocking Acquire's
// script (wait.lua) takes a free lock, or queues the waiter: its grant
// value in <prefix>{<name>}:w in arrival order, and in
// <prefix>{<name>}:wd its entry's expiry (3s), TTL and grant channel. The
// release script pops the first waiter whose entry has not expired (a
// dead waiter's is skipped), sets the key to that waiter's value with its
// TTL, increments the fence and publishes "<token>:<value>" on the
// waiter's Locker's grant channel: the waiter takes the grant with no
// request of its own. Each Locker subscribes one channel (one per slot in
// a Cluster with sharded pub/sub) on a connection of its own, whatever
// the number of names it waits on: no subscription per name, no sweep
// over names; a channel nobody waits on is closed after 30s. A waiter
// renews its entry every quarter of its TTL (between 10ms and 1s) with
// the same script, which also finds a grant whose message was lost (pub/sub
// is at most once: a reconnect, a slow subscriber) when the key already
// holds its value, and takes it, restarting its TTL; and, when the key is
// gone (a holder expired without a release), hands the lock to the head
// of the queue, so that a crashed holder's lock passes on within its TTL
// plus one renewal period, in order. When a subscription connection is
// re-established, its waiters renew at once. A lease granted by message
// is counted from the start of the waiter's last request that found it
// queued (the grant came after it), and refreshed once when that is more
// than a quarter of the TTL ago. A waiter whose ctx ends runs cancel.lua
// (in the background, bounded, twice when the first found nothing, as
// takes back do): it removes the entry or, when a grant reached the
// waiter meanwhile, releases it to the next waiter; nothing is left
// behind. A waiter that dies while queued is skipped once its entry
// expires; granted before that, it holds the lock until its TTL, as a
// crashed holder does. Every grant, by a release or by wait.lua, increments
// the fence in the same script. Concurrent waiters of one Locker each
// have their own entry.
//
// Redlock: waiters are woken by pub/sub, not by polling, and not all at
// once. An attempt that fails while its Locker has waiters on the name registers
// the Locker in the name's waiter queue, <prefix>{<name>}:q (a sorted set
// whose entries last 3s unless renewed by the next failed attempt; a
// Locker whose last waiter leaves removes itself). A release pops the
// Locker registered longest ago and publishes to its own channel,
// <prefix>{<name>}:rel:<locker id> (one, not more: a second woken Locker
// would only race the first for the nodes' votes); a woken waiter that
// loses the race registers again, at the back, and a woken Locker whose
// waiters all left passes the wake-up on to the next registered one. A
// waiter tries once a quorum of the nodes has sent the release's message
// (the release has run there; woken by the first node, it would be
// refused by the others), or 5ms after the first when fewer do (their
// queues disagree). So a release costs one attempt, not one per waiter,
// and waiters are served roughly in turn (not strictly: a newcomer may
// take a free lock first). Each Locker has one
// subscription connection (one per master with sharded pub/sub in a
// Cluster, one per node for Redlock) that multiplexes the channels of
// every name it waits on (in a Cluster, one per watched slot: go-redis
// re-sends a connection's channels in one SSUBSCRIBE after a reconnect,
// which the server refuses when they span slots); Watch returns only once
// the server has confirmed the subscription, or when its ctx ends, since
// SUBSCRIBE commands are sent by a goroutine per connection, never while
// a caller waits on a lock. A channel stays subscribed for 30s after
// its last waiter left, so that the next wait on the name costs no
// SUBSCRIBE. A wake-up lost to a broken connection, to a crashed
// Locker's registration or to a woken waiter's failed attempt (split
// votes, a slow node) is made up for by the portable layer's fallback
// timer (at most 1s), and every waiter is woken when a subscription
// connection is re-established.
//
// # Logs
//
// go-redis has one logger per process (goredis.SetLogger), not one per
// client. Importing this package installs Logger(): it prints every line
// exactly as go-redis's default logger does, except the failed dials of
// the clients dlock opened from a URL ("redis: connection pool: failed to
// dial after 5 attempts: …"), which go to their Locker's Observer
// (dlock.EventClientLog, the URL's secrets hidden) and are dropped when it
// has none. A program that calls goredis.SetLogger afterwards replaces it,
// as it would replace go-redis's default; goredis.SetLogger(ClientLog(obs))
// sends every go-redis line of the program to obs. Other lines of dlock's
// clients (rare: a connection with unread data, a pool that found no
// usable connection) are printed as go-redis prints them.
//
// # Semaphores
//
// Single server and Cluster: counting semaphores of up to MaxPermits
// (65536) permits (Capabilities.MaxPermits). The semaphore "x" is apart
// from the lock "x": its keys carry ":s" after the name's hash tag, which
// no lock key has, and share the name's slot. <prefix>{<name>}:s is a
// sorted set of the holders' grant values scored by the end of their
// lease in milliseconds of the server's clock (TIME), <prefix>{<name>}:s:t
// each holder's token, <prefix>{<name>}:s:n the number of permits N;
// these three expire together, never before the latest holder's lease
// (each grant and refresh extends them when needed), and the last release
// deletes them. <prefix>{<name>}:s:fence is the semaphore's own INCR
// counter (no expiry, as a lock's). One Lua script per operation, one
// round trip each:
//
//   - acquire trims the holders whose lease has ended (and their tokens),
//     refuses an N other than the stored one while any permit is held
//     (dlock.ErrInvalidOption; the attempt changes nothing), and when
//     fewer than N hold, adds the caller's value, increments the fence
//     (the token: strictly increasing across all the permits of the name,
//     with the durability of a lock's fence) and stores N; when all N are
//     held it returns the time until the first lease ends, so a waiter
//     never sleeps past it. A retried request whose first run was applied
//     finds its value and gets the token that run issued.
//   - refresh extends only the caller's own member, and only if its lease
//     has not ended (an ended one is removed, never revived).
//   - release removes only the caller's own member (an ended one is not
//     counted as released: ErrNotHeld).
//
// A crashed holder's permit is free once its TTL has passed (the next
// attempt trims it). As for locks, replication is asynchronous: a
// failover to a replica that had not received a grant forgets it, and
// more than N may then hold (check the token at the protected resource);
// a volatile-* eviction policy may evict the holders' keys, an allkeys-*
// one is refused. A free permit costs TryAcquire and Release 2 EVALSHA
// and 18 commands inside them, nothing published.
//
// Waiting for a permit (Capabilities.SemaphoreWait is WaitNotify, not
// fair): a Locker watching a semaphore registers in <prefix>{<name>}:s:q
// when its attempt fails, as Redlock's waiters do (see Waiting); a release
// that frees a permit wakes the two Lockers registered longest ago on
// <prefix>{<name>}:s:rel:<locker id> (sharded pub/sub in a Cluster on
// Redis 7), and their waiters try again; a release with nobody registered
// publishes nothing. A permit freed by expiry wakes nobody: the waiter's
// timer ends when the first lease does. A cancelled Acquire leaves no
// member (an attempt whose reply was lost is released in the background)
// and removes its Locker's registration when its Locker's last waiter on
// the name leaves. Not a FIFO grant queue as for locks: granting N holders
// from a queue needs a multi-grant hand-over, re-queuing of grants that
// expire unseen and a cancel that hands on a grant it never saw, which
// the lock's queue took several rounds to get right for one holder.
//
// Redlock has no semaphores (MaxPermits 0, so Locker.Semaphore returns
// dlock.ErrUnsupported): a permit held on a majority of the nodes does
// not bound the holders. With 3 nodes and 2 permits, holders on nodes
// {1,2}, {2,3} and {1,3} fill no node past 2, yet 3 hold; bounding the
// holders at N needs each grant on more than n·N/(N+1) of the n nodes,
// which is every node as soon as N ≥ n−1, and then a single node down
// stops every grant.
package redis
