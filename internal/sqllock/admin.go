package sqllock

// AdminDialect is implemented by a Dialect that can reach the server's
// sessions: each driver's admin.go. It is not part of Dialect, because
// no strategy runs this SQL; tests and hooks find it by a type assertion
// (sqltest.AdminSQL) and run it with sqltest.Exec.
type AdminDialect interface {
	// Admin is the SQL that tests and operators use to reach the
	// server's sessions, for table t.
	Admin(t Table) Admin
}

// Admin is SQL for tests and operators. Each statement takes the
// placeholders named in its comment.
type Admin struct {
	// Holder returns the session id of name's holder (1: name, passed to
	// the last statement). It may see the session of a past holder when
	// name is free.
	Holder []string
	// Kill ends a session (1: session id), freeing its locks at once.
	Kill string
	// Alive counts the sessions with that id (1: session id): Kill may
	// return before the session has ended and freed its locks.
	Alive string
	// Expire ends the version lease of name (1: name).
	Expire string
	// Waiters counts the sessions waiting in the server's lock queue
	// behind name's holder (1: name).
	Waiters string
}
