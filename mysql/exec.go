package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/internal/sqllock"
)

// A script of one statement tagged with one of these is executed, not
// queried: its answer is read from the server's OK packet (the last
// LAST_INSERT_ID(expr) the statement evaluated, the rows it changed), so
// the script needs no SELECT after it. A second statement in a
// multi-statement costs the server a flush and the client a wake-up per
// result; one statement alone is the floor's round trip.
const (
	// grantTag: the answer is one row, (the statement's LAST_INSERT_ID
	// when positive, else NULL; NULL): a version grant's token, and an
	// unknown remaining lease.
	grantTag = "/* dlock:grant */ "
	// changedTag: the answer is one row, (TRUE), when the statement
	// changed a row, and no row otherwise.
	changedTag = sqllock.ChangedTag
	// takeTag: as grantTag, for an UPDATE of the row when free whose
	// WHERE evaluates LAST_INSERT_ID(fence) when the row is held: (the
	// insert id, NULL) when it changed the row, (NULL, NULL) when it
	// did not but the insert id is set (the holder's token, never 0), no
	// row when the insert id is 0 (the statement found no row). A held row
	// does not match the WHERE: it counts as no row changed whatever
	// clientFoundRows says.
	takeTag = "/* dlock:take */ "
	// countTag: the answer is one row, (the rows the statement changed),
	// even 0.
	countTag = "/* dlock:count */ "
)

// A script of several statements in which one is tagged with one of these
// is executed, not queried, on a pinned connection (runOK): its answer is
// read from the statements' OK packets, so it needs no SELECT at its end,
// which would cost a result set (its column definitions, its row) on top
// of the OK packets that the server sends anyway.
const (
	// lockTag: the statement's insert id, when it inserted a row, is the
	// answer's one value. When it inserted none: after a statement tagged
	// foundTag, the answer is a found row, the value 0; otherwise the
	// script's last statement, tagged elseTag (a SELECT … INTO), is run
	// on its own (it is not sent with the others) and answers: a found
	// row, the value 0, when it affected one; no row when it did not.
	lockTag = "/* dlock:lock */ "
	elseTag = "/* dlock:else */ "
	// foundTag: the statement (a SELECT … INTO) found a row when it
	// affected one; the script answers no row when it did not.
	foundTag = "/* dlock:found */ "
	// execTag: the script answers nothing (no row); it is executed only.
	execTag = "/* dlock:exec */ "
	// lastIDTag: the answer is one row, (the statement's insert id: its
	// last LAST_INSERT_ID(expr), an update's included), when positive,
	// and no row otherwise (a getlock grant whose GET_LOCK refused wrote
	// nothing).
	lastIDTag = "/* dlock:lastid */ "
)

// runOK runs stmts on c when one of them is tagged with lockTag,
// lastIDTag or execTag (handled), as one multi-statement when multi is
// set, and scans the answer its tags define into dest.
func runOK(ctx context.Context, c *sql.Conn, multi bool, stmts []sqllock.Stmt, dest []any) (handled, found bool, err error) {
	fi, ki, li, exec := -1, -1, -1, false
	for i, s := range stmts {
		switch {
		case strings.HasPrefix(s.SQL, foundTag):
			fi = i
		case strings.HasPrefix(s.SQL, lockTag):
			ki = i
		case strings.HasPrefix(s.SQL, lastIDTag):
			li = i
		case strings.HasPrefix(s.SQL, execTag):
			exec = true
		}
	}
	if ki < 0 && li < 0 && !exec {
		return false, false, nil
	}
	var orElse []sqllock.Stmt
	if n := len(stmts) - 1; ki >= 0 && n > ki && strings.HasPrefix(stmts[n].SQL, elseTag) {
		stmts, orElse = stmts[:n], stmts[n:]
	}
	rows, ids, err := execAll(ctx, c, multi, stmts)
	switch {
	case err != nil:
		return true, false, err
	case li >= 0 && ids[li] <= 0:
		return true, false, nil
	case li >= 0:
		return true, true, assign(dest, ids[li])
	case ki < 0, fi >= 0 && rows[fi] == 0:
		return true, false, nil
	case rows[ki] == 1:
		return true, true, assign(dest, ids[ki])
	case fi >= 0:
		return true, true, assign(dest, int64(0))
	case orElse == nil:
		return true, false, nil
	}
	if rows, _, err = execAll(ctx, c, multi, orElse); err != nil || rows[0] == 0 {
		return true, false, err
	}
	return true, true, assign(dest, int64(0))
}

// execAll executes stmts and returns each one's affected rows and insert
// id: as one multi-statement through the driver's connection (whose
// result has every statement's figures), or one by one.
func execAll(ctx context.Context, c *sql.Conn, multi bool, stmts []sqllock.Stmt) (rows, ids []int64, err error) {
	if !multi || len(stmts) == 1 {
		for _, s := range stmts {
			res, err := c.ExecContext(ctx, s.SQL, s.Args...)
			if err != nil {
				return nil, nil, err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return nil, nil, err
			}
			id, err := res.LastInsertId()
			if err != nil {
				return nil, nil, err
			}
			rows, ids = append(rows, n), append(ids, id)
		}
		return rows, ids, nil
	}
	var b strings.Builder
	var args []sqldriver.NamedValue
	for i, s := range stmts {
		if i > 0 {
			b.WriteString(";\n")
		}
		b.WriteString(s.SQL)
		for _, a := range s.Args {
			v, err := sqldriver.DefaultParameterConverter.ConvertValue(a)
			if err != nil {
				return nil, nil, fmt.Errorf("mysql: argument %d: %w", len(args)+1, err)
			}
			args = append(args, sqldriver.NamedValue{Ordinal: len(args) + 1, Value: v})
		}
	}
	err = c.Raw(func(dc any) error {
		ex, ok := dc.(sqldriver.ExecerContext)
		if !ok {
			return errors.New("mysql: the driver's connection cannot execute")
		}
		res, err := ex.ExecContext(ctx, b.String(), args)
		if err != nil {
			return err
		}
		all, ok := res.(gomysql.Result)
		if !ok {
			return fmt.Errorf("mysql: the driver's result %T has no figures per statement", res)
		}
		rows, ids = all.AllRowsAffected(), all.AllLastInsertIds()
		return nil
	})
	if err == nil && (len(rows) != len(stmts) || len(ids) != len(stmts)) {
		err = fmt.Errorf("mysql: %d results for %d statements", len(rows), len(stmts))
	}
	return rows, ids, err
}

// execer is *sql.DB or *sql.Conn.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// runTagged runs s when it is tagged (handled), scanning its answer into
// dest as Run would scan the row of a query.
func runTagged(ctx context.Context, db execer, s sqllock.Stmt, dest []any) (handled, found bool, err error) {
	grant, take := strings.HasPrefix(s.SQL, grantTag), strings.HasPrefix(s.SQL, takeTag)
	count := strings.HasPrefix(s.SQL, countTag)
	if !grant && !take && !count && !strings.HasPrefix(s.SQL, changedTag) {
		return false, false, nil
	}
	res, err := db.ExecContext(ctx, s.SQL, s.Args...)
	if err != nil {
		return true, false, err
	}
	if grant || take {
		// The OK packet's insert id is the statement's last
		// LAST_INSERT_ID(expr), whatever clientFoundRows makes of the
		// row count.
		id, err := res.LastInsertId()
		if err != nil {
			return true, false, err
		}
		if take && id == 0 {
			return true, false, nil
		}
		if take {
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return true, err == nil, err
			}
		}
		var token any
		if id > 0 {
			token = id
		}
		return true, true, assign(dest, token, nil)
	}
	n, err := res.RowsAffected()
	if count && err == nil {
		return true, true, assign(dest, n)
	}
	if err != nil || n == 0 {
		return true, false, err
	}
	return true, true, assign(dest, true)
}

// assign stores vals in dest (pointers to *int64, int64, bool or any), a
// NULL as a nil pointer or zero value.
func assign(dest []any, vals ...any) error {
	if len(dest) > len(vals) {
		return fmt.Errorf("mysql: %d values to scan, the statement answers %d", len(dest), len(vals))
	}
	for i, d := range dest {
		v := vals[i]
		switch d := d.(type) {
		case *any:
			*d = v
		case **int64:
			*d = nil
			if n, ok := v.(int64); ok {
				*d = &n
			}
		case *int64:
			*d, _ = v.(int64)
		case *bool:
			*d, _ = v.(bool)
		default:
			return fmt.Errorf("mysql: cannot scan into %T", d)
		}
	}
	return nil
}
