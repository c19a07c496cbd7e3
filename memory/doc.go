// Package memory is dlock's in-process driver: a complete, concurrency-safe
// lock service inside one process, with TTL expiry, strictly increasing
// fencing tokens per name, FIFO hand-off to waiters (no polling) and the
// loss signal.
//
// It is the reference implementation the conformance suite runs first, and
// the backend to use in your own unit tests: code written against
// *dlock.Locker runs unchanged on mem:// in tests and on a real backend in
// production. Namespace.Revoke drops a holder's lease as a server would
// (its Done closes with dlock.ErrLockLost), so that code which must react
// to a lost lock can be tested.
//
// # URLs
//
//	mem://        a fresh private namespace for each Open
//	mem://NAME    the process-wide namespace NAME, shared by every Open of it
//
// No query parameters are accepted, nor a userinfo or a path. A Namespace
// made with NewNamespace and opened with OpenLocker needs no URL.
//
// # Guarantees
//
// Within one namespace, in one process: at most one holder per name; a
// lease not refreshed ends at its TTL (any TTL from dlock.MinTTL up: the
// expiry is time.Time arithmetic, which saturates); fencing tokens per
// name strictly increase for the namespace's life and start again in a
// new process (TokensSurviveRestart is false); waiters are granted in
// arrival order, handed the lock on release or expiry without polling. A
// holder that stops refreshing (a "crashed" one) keeps the lock for its
// TTL. Nothing is shared between processes: it is not a distributed lock.
//
// # Keys
//
// None: locks live in the Namespace's maps, keyed by the lock name as
// given, which is never transformed, so any name the portable layer
// accepts is its own key.
package memory
