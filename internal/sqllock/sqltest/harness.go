package sqltest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock"
)

// The SQL drivers' fault hooks, through an admin Locker on the server:
// internal/backendtest builds the conformance harness and the other test
// packages' hooks from them.

// Revoke makes the server drop the current lease of name: it ends the
// holder's session (pg_terminate_backend, KILL), or, for the version
// strategy, expires the lease row.
func Revoke(ctx context.Context, admin *dlock.Locker, strategy, name string) error {
	if strategy == "version" {
		var ok any
		_, err := run(ctx, admin, AdminSQL(admin).Expire, []any{name}, &ok)
		return err
	}
	session, err := HolderSession(ctx, admin, name)
	if err != nil {
		return err
	}
	return Kill(ctx, admin, session)
}

// HolderSession returns the server session that holds name (a pinned
// strategy's lock).
func HolderSession(ctx context.Context, admin *dlock.Locker, name string) (int64, error) {
	var session int64
	script := AdminSQL(admin).Holder
	stmts := make([]sqllock.Stmt, len(script))
	for i, q := range script {
		stmts[i].SQL = q
	}
	last := &stmts[len(stmts)-1]
	for range max(strings.Count(last.SQL, "?"), 1) { // "?": each is the name
		last.Args = append(last.Args, name)
	}
	found, err := Exec(ctx, admin, stmts, &session)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("sqltest: %q has no holder session", name)
	}
	return session, nil
}

// Kill ends a server session and waits until it is gone (its locks are
// freed when it ends, a moment after the holder may have learnt of it).
func Kill(ctx context.Context, admin *dlock.Locker, session int64) error {
	var ok any
	if _, err := run(ctx, admin, AdminSQL(admin).Kill, []any{session}, &ok); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int64
		if _, err := run(ctx, admin, AdminSQL(admin).Alive, []any{session}, &n); err != nil || n == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sqltest: session %d still alive 5s after it was killed", session)
		}
		time.Sleep(time.Millisecond)
	}
}

// Residue counts the sessions queued behind name's holder.
func Residue(ctx context.Context, admin *dlock.Locker, name string) (int, error) {
	var n int64
	_, err := run(ctx, admin, AdminSQL(admin).Waiters, []any{name}, &n)
	return int(n), err
}

func run(ctx context.Context, admin *dlock.Locker, sql string, args []any, dest ...any) (bool, error) {
	return Exec(ctx, admin, []sqllock.Stmt{{SQL: sql, Args: args}}, dest...)
}
