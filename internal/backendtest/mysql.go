package backendtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	_ "github.com/go-sql-driver/mysql" // sql.Open("mysql") for the hooks' own sessions
)

// Bystanders are sessions opened after a restart with the ids that
// sessions of before it had.
type Bystanders interface {
	// IDs returns the reused session ids.
	IDs() []int64
	// Ended returns the ids of the sessions that something ended since
	// they were opened.
	Ended(ctx context.Context) ([]int64, error)
	// Close closes the sessions.
	Close() error
}

// mysqlRestartReusingIDs restarts a MySQL/MariaDB server, whose connection
// ids start again from 1, and then opens connections until it holds one
// with every id that a client session had before the restart.
func mysqlRestartReusingIDs(e *Env) func(ctx context.Context) (Bystanders, error) {
	s := e.Servers[0]
	return func(ctx context.Context) (Bystanders, error) {
		db, err := sql.Open("mysql", s.DSN)
		if err != nil {
			return nil, err
		}
		var old []int64
		rows, err := db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Daemon', 'Binlog Dump') AND USER NOT IN ('system user', 'event_scheduler')")
		if err == nil {
			for rows.Next() {
				var id int64
				if err = rows.Scan(&id); err != nil {
					break
				}
				old = append(old, id)
			}
			err = errors.Join(err, rows.Err(), rows.Close())
		}
		_ = db.Close()
		if err != nil {
			return nil, fmt.Errorf("backendtest: mysql: client sessions: %w", err)
		}
		if err := e.restart(ctx, 0); err != nil {
			return nil, err
		}
		by := &mysqlBystanders{want: map[int64]bool{}, conns: map[int64]*sql.Conn{}}
		if by.db, err = sql.Open("mysql", s.DSN); err != nil {
			return nil, err
		}
		by.db.SetMaxIdleConns(0) // a closed Conn ends its session: its id is not reused by the pool
		var hi int64
		for _, id := range old {
			by.want[id] = true
			hi = max(hi, id)
		}
		// Open connections until the server's ids pass the highest old
		// one; keep those with an old id, close the others.
		for id := int64(0); id < hi; {
			c, err := by.db.Conn(ctx)
			if err != nil {
				_ = by.Close()
				return nil, fmt.Errorf("backendtest: mysql: bystander session: %w", err)
			}
			if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				_ = c.Close()
				_ = by.Close()
				return nil, fmt.Errorf("backendtest: mysql: bystander session: %w", err)
			}
			if by.want[id] {
				by.conns[id] = c
			} else {
				_ = c.Close()
			}
		}
		return by, nil
	}
}

// mysqlBystanders are sessions holding the ids that clients had before a
// restart (some ids may have gone to clients' own new sessions instead).
type mysqlBystanders struct {
	db    *sql.DB
	want  map[int64]bool
	conns map[int64]*sql.Conn
}

func (b *mysqlBystanders) IDs() []int64 {
	ids := make([]int64, 0, len(b.conns))
	for id := range b.conns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (b *mysqlBystanders) Ended(ctx context.Context) ([]int64, error) {
	var ended []int64
	for _, id := range b.IDs() {
		var got int64
		err := b.conns[id].QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&got)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err() // not an answer about the session
		}
		if err != nil || got != id {
			ended = append(ended, id)
		}
	}
	return ended, nil
}

func (b *mysqlBystanders) Close() error {
	for _, c := range b.conns {
		_ = c.Close()
	}
	return b.db.Close()
}
