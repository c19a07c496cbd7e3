// Package dlock is one API for distributed locks and counting semaphores
// over Redis, ZooKeeper, etcd, PostgreSQL and MySQL, with fencing tokens and
// a lost-lease signal on every backend.
//
// A backend is chosen by URL; import its driver package for its side effect:
//
//	import (
//		"github.com/dlock-go/dlock"
//		_ "github.com/dlock-go/dlock/redis"
//	)
//
//	l, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0")
//	lease, err := l.Acquire(ctx, "orders/42", nil) // blocks until held or ctx ends
//	defer lease.Release(ctx)
//	select {
//	case <-lease.Done(): // lost: stop writing
//	default:
//	}
//	db.Exec("UPDATE orders SET ... WHERE id = 42 AND fence < $1", lease.Token())
//
// # Leases
//
// A Lease lasts its TTL (default 30s) and is refreshed every TTL/3 by a
// keep-alive until released. Its Done channel closes when it ends. On
// TTL-bound backends Done closes at a local deadline computed on the
// monotonic clock from the start of the last successful acquire or refresh
// request, minus a drift margin (1% of the TTL + 2ms), so a holder learns
// of the loss before the server can give the lock to someone else.
//
// No lease lock gives mutual exclusion under long process pauses or network
// partitions by itself. The fencing token does: Token strictly increases
// across successive holders of a name, and the protected resource must
// refuse a write whose token is lower than one it has already seen.
//
// # Semaphores
//
// Locker.Semaphore gives a counting semaphore: at most N holders of a name
// at once across processes, each permit an ordinary Lease with its own
// fencing token (tokens strictly increase across all the permits of a
// name). Capabilities.MaxPermits says whether and how far a backend has
// them (Redlock has none).
//
//	exports, err := l.Semaphore("exports", 4)
//	err = exports.Do(ctx, nil, func(ctx context.Context, permit *dlock.Lease) error { ... })
//
// # Schemes
//
// mem:// (package memory), redis://, rediss://, redis+cluster://,
// redlock:// (package redis), zk:// (package zookeeper), postgres:// and
// postgresql:// (package postgres), mysql:// (package mysql), etcd:// and
// etcds:// (package etcd, a module of its own). Schemes lists those
// registered in a program.
//
// # Observing
//
// OpenWith (and NewLockerWith, and each driver's OpenLocker through its
// Options.Observer) installs an Observer that sees every step of the
// Locker's leases as an Event: attempt, wait and each wake-up, grant (with
// the wait and the token), not acquired (and why), refresh (latency and
// error), lost (why, and how long before the local deadline), release
// (hold time), the Locker's close, and the lines the backend's client
// library logs. Events carry names and errors, never URLs or passwords.
// There is no global hook: each Locker has its own.
//
//	l, err := dlock.OpenWith(ctx, url, &dlock.Options{Observer: dlock.NewSlogObserver(logger)})
//
// NewSlogObserver logs to a log/slog Logger (a loss at Error, failures at
// Warn, the steps at Debug). The module github.com/dlock-go/dlock/otel
// records OpenTelemetry metrics and spans, so that this module requires
// no OpenTelemetry package. A Locker without an Observer pays nothing for
// the hook, and one whose slog level is disabled no allocation.
//
// A client library's own log lines never reach the program's stderr
// behind its back: a driver that opened its client from a URL (MySQL,
// ZooKeeper, etcd) drops them, or passes them to the Observer as
// EventClientLog. go-redis has one logger for the whole process: the
// redis package installs one that prints as go-redis's default does
// except the failed dials of the clients dlock opened, which go to their
// Locker's Observer (see redis.Logger).
//
// # Drivers
//
// A backend implements driver.Locker and is proved by the conformance suite
// (package conformance). Everything that is the same for every backend —
// argument checks, waiting, keep-alive, deadlines, reentrancy, closing,
// error wrapping — is done here, once.
package dlock
