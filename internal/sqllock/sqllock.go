// Package sqllock is the strategy core shared by dlock's SQL drivers
// (packages postgres and mysql). The three strategies are written here
// once, over two small abstractions each driver implements:
//
//   - Pool and Conn: a connection pool and one pinned connection of it
//     (pgxpool.Pool / pgxpool.Conn; *sql.DB / *sql.Conn), able to run a
//     short script of statements in as few round trips as the protocol
//     allows (a pgx batch; a MySQL multi-statement).
//   - Dialect: the SQL text of each step and the classification of the
//     database's errors (lock not available, deadlock, connection broken).
//
// The strategies:
//
//   - ForUpdate: a row of the lock table locked by SELECT … FOR UPDATE in
//     a transaction kept open on a pinned connection. The server's lock
//     queue is the wait; Release rolls back.
//   - Native: the database's own named lock (pg_advisory_lock, GET_LOCK)
//     on a pinned connection; the token is taken right after the grant
//     (PostgreSQL: from the counter, writing no row; MySQL: the name's
//     row's fence, moved on by an autocommitted UPDATE).
//   - Version: an optimistic lease row whose expiry is computed by the
//     server's clock; no connection is pinned.
//
// Every strategy has counting semaphores too (driver.Request.Permits),
// in a table of their own beside the lock table: a header row storing the
// number of permits and a slot row (or a session lock) per permit; see
// SemDialect.
//
// Every strategy can be inspected (Locker.Inspect, dlock status) through
// the dialect's Inspect: the holder's session as the server shows it, what
// the grant recorded where other sessions can read it (the row, a
// session's application_name), and the sessions queued for the lock.
//
// Tokens come from one counter per lock table that is never rolled back
// (a PostgreSQL sequence; an InnoDB AUTO_INCREMENT), so a holder whose
// transaction is rolled back when its connection dies can never share its
// token with the next holder; a dialect may instead move the name's row's
// fence on in the grant's own autocommitted statement, which returns the
// token only once committed (MySQL's version and getlock). ForUpdate takes its token
// inside the lease's open transaction, which commits nothing (the release
// rolls back): a crash of the server may set the counter back, and the
// dialect's volatile marker, which the crash erases, makes the next grant
// move the counter on first (Dialect.Recover). A counter is
// created starting at the server's clock in microseconds, so that one
// dropped and created again goes on above the old one's tokens.
//
// One table serves one strategy (Locker.ensure claims it), and its name
// is resolved by the server before keys or channels are derived from it.
// Every duration sent to a server is converted by the saturating helpers
// (CeilUnits) within the strategy's declared TTL range (Dialect.TTLRange).
package sqllock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Strategy names a locking strategy.
type Strategy string

// The strategies.
const (
	ForUpdate Strategy = "forupdate"
	Version   Strategy = "version"
	Native    Strategy = "native"
)

// DefaultTable is the lock table's name when none is configured.
const DefaultTable = "dlock_locks"

// Stmt is one SQL statement with its arguments.
type Stmt struct {
	SQL  string
	Args []any
}

// S returns the statement sql with args: the dialects' shorthand, so that
// their scripts read as SQL.
func S(sql string, args ...any) Stmt { return Stmt{SQL: sql, Args: args} }

// ChangedTag starts a script's last statement that is to be executed, not
// queried: its answer is one row, (TRUE), when the statement changed a
// row, and no row otherwise. The count of rows changed comes with the
// statement's completion (PostgreSQL's command tag, MySQL's OK packet),
// so the statement needs no RETURNING or SELECT, and the client decodes
// no row: a conditional release or refresh then costs what the floor's
// plain UPDATE does.
const ChangedTag = "/* dlock:changed */ "

// Conn is one connection pinned for the life of a lease (or an attempt).
type Conn interface {
	// Run executes stmts in order on this connection, in as few round trips
	// as the driver allows, stopping at the first error. The first row of
	// the last statement is scanned into dest; Run reports whether there
	// was one.
	Run(ctx context.Context, stmts []Stmt, dest ...any) (bool, error)
	// Session is the server's id of the connection (PostgreSQL backend
	// pid, MySQL connection id).
	Session() int64
	// Abandon makes the server stop the work of this connection (a wait
	// in a lock queue) and drop it: it is called after a statement was
	// interrupted or failed in a way that leaves the connection's state
	// unknown. The connection is discarded afterwards.
	Abandon(ctx context.Context)
	// Release returns the connection to its pool, or closes it when
	// discard is true. It is called exactly once.
	Release(discard bool)
}

// Pool is a connection pool.
type Pool interface {
	// Pin takes a connection out of the pool.
	Pin(ctx context.Context) (Conn, error)
	// Run executes stmts like Conn.Run on some connection of the pool.
	Run(ctx context.Context, stmts []Stmt, dest ...any) (bool, error)
	// Close closes the pool if the driver opened it (never a pool that
	// the user passed in).
	Close()
	// MaxConns is the most connections the pool opens (0: no limit).
	MaxConns() int
}

// Notifier is implemented by pools whose database can notify listeners
// (PostgreSQL LISTEN/NOTIFY).
type Notifier interface {
	// Listen opens a dedicated connection listening on channels.
	Listen(ctx context.Context, channels ...string) (Listening, error)
}

// Listening is an open LISTEN.
type Listening interface {
	// Next blocks until a notification arrives and returns its channel
	// and payload.
	Next(ctx context.Context) (channel, payload string, err error)
	Close()
}

// VersionQueuer is implemented by the dialect of a Notifier pool whose
// version waiters queue in the server for a grant: a release hands the
// lease to the first live waiter and notifies that waiter's Locker on its
// grant channel with "<nonce> <token>", in the release's own statement
// (one round trip from release to the next holder). VersionHandover and
// VersionAbort grant to the queue; VersionAbort also takes r.Nonce's
// entry out of it.
type VersionQueuer interface {
	// VersionWait takes the lease row when it is free or expired, or
	// when a release granted it to r.Nonce already (its TTL then starts
	// again); otherwise it queues r.Nonce (owner, TTL, grant channel
	// r.Channel) behind the waiters queued before it, for entry on the
	// server's clock, or renews its entry in place. One row: the token
	// (NULL when queued), the microseconds the current holder's lease
	// still lasts (NULL when unknown), and whether waiters are queued.
	VersionWait(t Table, r Req, entry time.Duration) []Stmt
	// VersionHandover frees r.Token's lease, or hands it to the first
	// live waiter: a row when it was held. (VersionRelease frees it only
	// when nobody waits for it, and returns no row otherwise; the Locker
	// then runs VersionHandover, which also notifies r.Channel, the
	// table's, for waiters that do not queue.)
	VersionHandover(t Table, r Req) []Stmt
}

// VersionPeeker is a RowCreator whose VersionAcquire without r.Create is
// the version floor's one conditional UPDATE, which reads the row once:
// one row, the token, when it took the lease; no row when it did not
// (held by another, or no row for the name). A statement that also
// answered the holder's remaining time on a miss read the row twice and
// cost every grant 4–5 % over the floor (PostgreSQL, same server, in
// turns); the miss now costs a second round trip, VersionPeek, and only
// for a TryAcquire: a blocking Acquire queues (VersionWait) at once.
type VersionPeeker interface {
	// VersionPeek reads r.Name's row: one row, the microseconds its
	// holder's lease still lasts (NULL or not positive: free or
	// unknown); no row when the name has none.
	VersionPeek(t Table, r Req) []Stmt
}

// Kind classifies a database error.
type Kind int

// Error kinds.
const (
	// KindOther: a server error after which the connection is usable.
	KindOther Kind = iota
	// KindBusy: the lock is held by someone else (NOWAIT, lock_timeout,
	// innodb_lock_wait_timeout).
	KindBusy
	// KindDeadlock: the server chose this statement as a deadlock victim.
	KindDeadlock
	// KindBroken: the connection is unusable or in an unknown state.
	KindBroken
)

// Req is what the dialect needs to build a script.
type Req struct {
	Name  string
	Owner string
	// TTL is the lease length; scripts of pinned strategies set the
	// server's idle timeout from it.
	TTL time.Duration
	// NoWait: fail at once when the lock is held (TryAcquire).
	NoWait bool
	// Wait bounds a blocking wait (0: no bound). A dialect has the server
	// end the wait WaitMargin sooner (ServerWait).
	Wait time.Duration
	// Token is the grant's token (version refresh and release).
	Token int64
	// Channel is the notification channel (version release).
	Channel string
	// Missed: Abort follows a Lock that returned no row without an error
	// (not granted; for ForUpdate, no row for the name).
	Missed bool
	// Permits is the semaphore's number of permits (0: a lock).
	Permits int
	// Slot is the slot a semaphore's pinned permit holds (1 to Permits).
	Slot int
	// Nonce identifies one version attempt: VersionAcquire stores it in
	// the row (column session), so that VersionAbort can free a grant
	// whose reply was lost.
	Nonce int64
	// Create: a RowCreator's ForUpdate Lock or VersionAcquire creates the
	// name's row if missing, in the same script.
	Create bool
}

// RowCreator is a Dialect whose ForUpdate Lock and VersionAcquire create
// the name's row when r.Create is set, and without it may assume that
// the row exists (they answer no row when it does not). Lock creates it
// committed on its own, before the lock's transaction, with EnsureRow's
// bounds on waiting, so that the first use of a name is one round trip:
// not a failed Lock, its Abort, EnsureRow and Lock again; VersionAcquire
// without Create may use a cheaper statement. The Locker sets Create for
// the names it has not found a row for yet (Locker.rows), and after an
// attempt that found none.
type RowCreator interface {
	CreatesRow()
}

// Dialect supplies the SQL of each step and classifies errors. Scripts
// whose result is read return it in the first row of their last
// statement, as documented per method.
type Dialect interface {
	// Backend is the capability's backend name ("postgres", "mysql").
	Backend() string
	// NativeStrategy names the native strategy ("advisory", "getlock").
	NativeStrategy() string
	// Quote quotes one validated identifier.
	Quote(ident string) string
	// MaxIdent is the longest identifier the server accepts.
	MaxIdent() int
	// ValidateName rejects names the database cannot store (wrapping
	// driver.ErrInvalidName); it must not contact the server.
	ValidateName(name string) error
	// Classify classifies an error returned by Run.
	Classify(err error) Kind
	// Placeholder returns the n-th (1-based) argument placeholder.
	Placeholder(n int) string

	// Migrate creates the lock table and the token counter if missing.
	Migrate(t Table) []Stmt
	// EnsureRow inserts the name's row if missing. It must not wait for
	// a holder's lock on an existing row longer than r allows (NoWait:
	// not at all); a lock-not-available error then means the row exists.
	EnsureRow(t Table, r Req) []Stmt

	// Lock takes the lock of a pinned strategy (ForUpdate, Native). When
	// granted, the last statement returns one row: the token. No row
	// means: ForUpdate: the name's row is missing (EnsureRow, or for a
	// RowCreator r.Create, then try again); Native: not granted within r.Wait (or at once with NoWait).
	Lock(s Strategy, t Table, r Req) []Stmt
	// Recover is run (on the connection of a ForUpdate attempt, after its
	// Abort) when Lock returned the token 0. ForUpdate's token is the
	// counter's value, taken in the lease's open transaction, which the
	// release rolls back: neither the grant nor the release waits for a
	// flush, and a crash of the server may set the counter back, since
	// its advance was never flushed. So the dialect keeps a volatile
	// marker that every crash or failover of the server erases
	// (PostgreSQL: an UNLOGGED table; MySQL: a MEMORY table naming the
	// server), and Lock takes a token only while the marker is there,
	// returning 0 when it is not. Recover moves the counter on past every
	// value the server can have issued before the crash and then sets
	// the marker, the counter's jump committed (as durably as the
	// server's settings make a commit) before the marker is visible, so
	// before any token of the new run of the server is taken. It does
	// nothing when it finds the marker (another client recovered first).
	Recover(t Table) []Stmt
	// Abort undoes a Lock that failed on a usable connection (rolls back,
	// unlocks, restores the session's settings). It may be empty when
	// there is nothing to undo (r.Missed on a Lock that changes nothing
	// unless granted).
	Abort(s Strategy, t Table, r Req) []Stmt
	// Ping keeps a pinned lease alive (it resets the server's idle timer)
	// and returns one row: true while the lock is held.
	Ping(s Strategy, t Table, r Req) []Stmt
	// Unlock releases a pinned lease and restores the session. If its
	// last statement returns a row, it is true when the lock was held.
	Unlock(s Strategy, t Table, r Req) []Stmt

	// VersionAcquire takes the lease row when free or expired. One row:
	// the token (NULL when held by another) and the microseconds the
	// current holder's lease still lasts (NULL when unknown). No row
	// means that name has no row yet: EnsureRow, then try again. (A
	// VersionPeeker's answers without r.Create differ: see there.)
	VersionAcquire(t Table, r Req) []Stmt
	// VersionRefresh extends r.Token's lease: a row when it was held.
	VersionRefresh(t Table, r Req) []Stmt
	// VersionRelease frees r.Token's lease (for a VersionQueuer: or
	// hands it to the first live waiter) and may notify r.Channel, the
	// table's: a row when it was held.
	VersionRelease(t Table, r Req) []Stmt
	// VersionAbort frees the lease that the attempt r.Nonce may have been
	// granted (its reply lost to a cancelled context or a broken
	// connection) and notifies r.Channel.
	VersionAbort(t Table, r Req) []Stmt

	// Inspect reads name's state without taking it or waiting for it
	// (r.Name only). One row: whether the lock is held (bool); the
	// holder's r.Owner (NULL: unknown); the last token issued for the name
	// (NULL or 0: unknown); the microseconds the holder's lease still
	// lasts on the server (NULL: unknown, or bound to a session); the
	// number of sessions queued for the lock (NULL: unknown). No row
	// means free with nothing known.
	Inspect(s Strategy, t Table, r Req) []Stmt

	// TTLRange is the range of TTLs the strategy honours: the server keeps
	// a lease of a TTL in it for at least that TTL, and can end it at
	// that granularity (Capabilities.MinTTL and MaxTTL).
	TTLRange(s Strategy) (lo, hi time.Duration)

	// Check returns one row: why the server cannot serve the table's
	// tokens durably (empty when it can).
	Check(t Table) []Stmt
	// FoldIdent folds an identifier as the server folds an unquoted one
	// (PostgreSQL: to lower case), so that "Locks" and "locks" name one
	// table, as they do in the server's SQL.
	FoldIdent(ident string) string
	// Resolve returns one row: the schema and the name of the table
	// as the server resolves t.Q (PostgreSQL: through search_path); no
	// row when it does not exist.
	Resolve(t Table) []Stmt
	// Claim records strategy as the table's strategy unless one is
	// recorded (in the row of the empty name, which is no lock name) and
	// returns one row: the recorded strategy.
	Claim(t Table, strategy string) []Stmt
}

// Table is a validated, quoted lock table with its token counter.
type Table struct {
	// Raw is the name as configured ("dlock_locks" or "schema.table").
	Raw string
	// Canon is "schema.table" as the server resolves Raw (set once the
	// Locker has reached the server; empty before). Everything derived
	// from the table's name (advisory keys, the channel) uses Key, so
	// that two spellings of one table name the same locks.
	Canon string
	// Q is the quoted, possibly schema-qualified table.
	Q string
	// Seq is the quoted token counter (a sequence or a table) next to it.
	Seq string
	// Live is the quoted volatile marker next to it (Dialect.Recover).
	Live string
	// Sem is the quoted semaphore table next to it (SemDialect).
	Sem string
	// Channel is the notification channel of the table's releases.
	Channel string
}

// Key is the name that keys and channels are derived from: Canon once
// known, Raw before.
func (t Table) Key() string {
	if t.Canon != "" {
		return t.Canon
	}
	return t.Raw
}

// Canonical returns t named as the server resolves it: schema.name,
// quoted, with the counter in the same schema.
func Canonical(d Dialect, t Table, schema, name string) Table {
	canon := schema + "." + name
	sum := sha256.Sum256([]byte(canon))
	t.Canon = canon
	t.Q = d.Quote(schema) + "." + d.Quote(name)
	t.Seq = d.Quote(schema) + "." + d.Quote(name+SeqSuffix)
	t.Live = d.Quote(schema) + "." + d.Quote(name+LiveSuffix)
	t.Sem = d.Quote(schema) + "." + d.Quote(name+SemSuffix)
	t.Channel = "dlock_" + hex.EncodeToString(sum[:8])
	return t
}

// DefaultTableFor is the lock table of strategy s when none is
// configured (or DefaultTable is): DefaultTable for ForUpdate, and
// DefaultTable_<strategy> for the others, since one table serves one
// strategy.
func DefaultTableFor(d Dialect, s Strategy) string {
	switch s {
	case ForUpdate:
		return DefaultTable
	case Native:
		return DefaultTable + "_" + d.NativeStrategy()
	}
	return DefaultTable + "_" + string(s)
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// SeqSuffix is appended to the table's name to name its token counter.
const SeqSuffix = "_fence"

// LiveSuffix is appended to the table's name to name its volatile marker
// (Dialect.Recover); it is no longer than SeqSuffix.
const LiveSuffix = "_live"

// ParseTable validates raw ("table" or "schema.table") as identifiers
// (letters, digits, underscores; not starting with a digit; short enough
// for the counter's name) and quotes it with the dialect. Invalid names
// wrap driver.ErrInvalidOption: they never reach the server.
func ParseTable(d Dialect, raw string) (Table, error) {
	if raw == "" {
		raw = DefaultTable
	}
	parts := strings.Split(raw, ".")
	if len(parts) > 2 {
		return Table{}, fmt.Errorf("%s: table %q: want table or schema.table: %w", d.Backend(), raw, driver.ErrInvalidOption)
	}
	for i, p := range parts {
		max := d.MaxIdent()
		if i == len(parts)-1 {
			max -= len(SeqSuffix)
		}
		if !identRE.MatchString(p) || len(p) > max {
			return Table{}, fmt.Errorf("%s: table %q: each part must be letters, digits and underscores, not starting with a digit, at most %d bytes: %w",
				d.Backend(), raw, max, driver.ErrInvalidOption)
		}
	}
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = d.Quote(p)
	}
	seq := append([]string(nil), q[:len(q)-1]...)
	live := append(seq[:len(seq):len(seq)], d.Quote(parts[len(parts)-1]+LiveSuffix))
	sem := append(seq[:len(seq):len(seq)], d.Quote(parts[len(parts)-1]+SemSuffix))
	seq = append(seq, d.Quote(parts[len(parts)-1]+SeqSuffix))
	sum := sha256.Sum256([]byte(raw))
	return Table{
		Raw:     raw,
		Q:       strings.Join(q, "."),
		Seq:     strings.Join(seq, "."),
		Live:    strings.Join(live, "."),
		Sem:     strings.Join(sem, "."),
		Channel: "dlock_" + hex.EncodeToString(sum[:8]),
	}, nil
}

// ParseStrategy maps a URL's strategy parameter to a Strategy: the
// native strategy is named after the dialect ("advisory", "getlock").
func ParseStrategy(d Dialect, s string) (Strategy, error) {
	switch s {
	case "", string(ForUpdate):
		return ForUpdate, nil
	case string(Version):
		return Version, nil
	case d.NativeStrategy(), string(Native):
		return Native, nil
	}
	return "", fmt.Errorf("%s: strategy %q: want %s, %s or %s: %w", d.Backend(), s, ForUpdate, Version, d.NativeStrategy(), driver.ErrInvalidOption)
}

// FencedStmt builds a fenced write to a user's table (fencedSQL) with its
// arguments bound: args fill the placeholders of set and where in order,
// and token goes where the dialect's placeholders put it.
func FencedStmt(d Dialect, table, column string, token uint64, set, where string, args []any) (Stmt, error) {
	q, tokenFirst, err := fencedSQL(d, table, column, set, where, len(args))
	if err != nil {
		return Stmt{}, err
	}
	if tokenFirst {
		return S(q, append([]any{int64(token)}, args...)...), nil
	}
	return S(q, append(args[:len(args):len(args)], int64(token))...), nil
}

// fencedSQL builds the statement of a fenced write to a user's table:
//
//	UPDATE table SET <set>, column = <token> WHERE (<where>) AND column <= <token>
//
// nargs is the number of placeholders set and where use. A write with a
// token lower than one the row has seen matches no row. table may be
// schema-qualified; table and column are validated as identifiers and
// quoted. With numbered placeholders ($n) the token is argument nargs+1;
// with positional ones (?) it is bound once, first (tokenFirst), through
// a one-row derived table that the UPDATE joins.
func fencedSQL(d Dialect, table, column, set, where string, nargs int) (q string, tokenFirst bool, err error) {
	t, err := ParseTable(d, table)
	if err != nil {
		return "", false, err
	}
	if !identRE.MatchString(column) || len(column) > d.MaxIdent() {
		return "", false, fmt.Errorf("%s: fence column %q is not an identifier: %w", d.Backend(), column, driver.ErrInvalidOption)
	}
	if strings.TrimSpace(where) == "" {
		where = "TRUE"
	}
	if strings.TrimSpace(set) != "" {
		set += ", "
	}
	col := d.Quote(column)
	if p := d.Placeholder(nargs + 1); p != "?" {
		return fmt.Sprintf("UPDATE %s SET %s%s = %s WHERE (%s) AND %s <= %s", t.Q, set, col, p, where, col, p), false, nil
	}
	return fmt.Sprintf("UPDATE %s JOIN (SELECT ? AS dlock_token) AS dlock_f SET %s%s.%s = dlock_f.dlock_token WHERE (%s) AND %s.%s <= dlock_f.dlock_token",
		t.Q, set, t.Q, col, where, t.Q, col), true, nil
}

// CeilUnits returns d in whole units of unit, rounded up (never down, so
// a server-side timeout is never shorter than d), within [lo, hi]. It
// cannot overflow: it divides before it rounds.
func CeilUnits(d, unit time.Duration, lo, hi int64) int64 {
	n := int64(d / unit)
	if d%unit > 0 {
		n++ // n ≤ MaxInt64/unit + 1: no overflow for unit ≥ 2
	}
	return min(max(n, lo), hi)
}

// Micros returns d in whole microseconds rounded up, at least 1.
func Micros(d time.Duration) int64 { return CeilUnits(d, time.Microsecond, 1, math.MaxInt64) }

// CeilSeconds returns d in whole seconds rounded up, within [lo, hi].
func CeilSeconds(d time.Duration, lo, hi int64) int64 { return CeilUnits(d, time.Second, lo, hi) }

// WaitMargin is how much sooner than a blocking Acquire's deadline the
// server ends its wait (lock_timeout, GET_LOCK's timeout): the server's
// timer starts when the statement reaches it, so a wait it ends at the
// deadline or later always loses the race with the context's deadline,
// whose interruption of the statement costs the connection (the driver
// abandons it, and the next lease pays for a new one). It is less than
// rewaitMin: a wait the server ends this early is not started again; the
// Locker waits out the deadline with the connection back in the pool.
// (MySQL's innodb_lock_wait_timeout counts whole seconds: the forupdate
// waits there cannot be ended this way.)
const WaitMargin = 20 * time.Millisecond

// rewaitMin: a wait the server ended with less than this left before the
// deadline is not started again.
const rewaitMin = 50 * time.Millisecond

// ServerWait is how long the server should wait for r's lock: r.Wait less
// WaitMargin, at least lo (0 when r.Wait is 0: no bound).
func ServerWait(r Req, lo time.Duration) time.Duration {
	if r.Wait <= 0 {
		return 0
	}
	return max(r.Wait-WaitMargin, lo)
}

// CeilMillis returns d in whole milliseconds rounded up, within [lo, hi].
func CeilMillis(d time.Duration, lo, hi int64) int64 { return CeilUnits(d, time.Millisecond, lo, hi) }

// FromMicros returns n microseconds as a Duration, saturating at the
// largest Duration (a remaining lease time read from the server).
func FromMicros(n int64) time.Duration {
	switch {
	case n <= 0:
		return 0
	case n > int64(math.MaxInt64/time.Microsecond):
		return math.MaxInt64
	}
	return time.Duration(n) * time.Microsecond
}

// NewConfig validates a driver's options (the strategy's name and the
// table) into a Config; the driver sets its Pool. Drivers call it before
// they open a pool, so that invalid options open nothing.
func NewConfig(d Dialect, strategy, table string, migrate bool) (Config, error) {
	s, err := ParseStrategy(d, strategy)
	if err != nil {
		return Config{}, err
	}
	if table == "" || table == DefaultTable {
		table = DefaultTableFor(d, s)
	}
	parts := strings.Split(table, ".")
	for i, p := range parts {
		parts[i] = d.FoldIdent(p)
	}
	t, err := ParseTable(d, strings.Join(parts, "."))
	if err != nil {
		return Config{}, err
	}
	return Config{Dialect: d, Strategy: s, Table: t, Migrate: migrate}, nil
}
