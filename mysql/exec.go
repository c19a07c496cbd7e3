package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

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
	changedTag = "/* dlock:changed */ "
)

// execer is *sql.DB or *sql.Conn.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// runTagged runs s when it is tagged (handled), scanning its answer into
// dest as Run would scan the row of a query.
func runTagged(ctx context.Context, db execer, s sqllock.Stmt, dest []any) (handled, found bool, err error) {
	grant := strings.HasPrefix(s.SQL, grantTag)
	if !grant && !strings.HasPrefix(s.SQL, changedTag) {
		return false, false, nil
	}
	res, err := db.ExecContext(ctx, s.SQL, s.Args...)
	if err != nil {
		return true, false, err
	}
	if grant {
		// The OK packet's insert id is the statement's last
		// LAST_INSERT_ID(expr), whatever clientFoundRows makes of the
		// row count.
		id, err := res.LastInsertId()
		if err != nil {
			return true, false, err
		}
		var token any
		if id > 0 {
			token = id
		}
		return true, true, assign(dest, token, nil)
	}
	n, err := res.RowsAffected()
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
