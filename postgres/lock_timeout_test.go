package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestForUpdateLockTimeoutBeforeTheWait: forupdate's grant is one
// statement whose scan sets lock_timeout before the row lock is waited
// for, so the server ends a wait for a held row at the request's wait
// (less sqllock.WaitMargin), without the client's context ending (which
// would cost the connection).
func TestForUpdateLockTimeoutBeforeTheWait(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := dlock.Open(ctx, srv.URL+"&strategy=forupdate&table=lock_timeout_locks")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.TryAcquire(ctx, "waited", &dlock.AcquireOptions{NoKeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	tbl, err := sqllock.ParseTable(dialect{}, "lock_timeout_locks")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	const wait = 300 * time.Millisecond
	for _, owner := range []string{"", "owner/1"} {
		b := &pgx.Batch{}
		for _, s := range (dialect{}).Lock(sqllock.ForUpdate, tbl, sqllock.Req{Name: "waited", Owner: owner, TTL: 10 * time.Second, Wait: wait}) {
			b.Queue(s.SQL, s.Args...)
		}
		actx, acancel := context.WithTimeout(ctx, 20*wait)
		start := time.Now()
		err := c.SendBatch(actx, b).Close()
		took := time.Since(start)
		acancel()
		var pe *pgconn.PgError
		if early := wait - sqllock.WaitMargin; !errors.As(err, &pe) || pe.Code != "55P03" || took < early || took > 20*wait {
			t.Errorf("owner %q: a wait of %v for a held row ended after %v with %v; want lock_not_available (55P03) after %v", owner, wait, took, err, early)
		}
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
	}
}
