package postgres_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestForUpdateAnnouncesOnlyWithOwner: a forupdate lease with an Owner
// announces its token and owner in its session's application_name, where
// Inspect reads them; one without announces nothing (setting
// application_name costs every grant), and Inspect reports it held, its
// owner and token unknown, as on advisory.
func TestForUpdateAnnouncesOnlyWithOwner(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sc, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(context.Background())
	l := sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", "forupdate"))
	const name = "announce"
	announced := func(pid int64) string {
		t.Helper()
		var app string
		if err := sc.QueryRow(ctx, "SELECT application_name FROM pg_stat_activity WHERE pid = $1", pid).Scan(&app); err != nil {
			t.Fatal(err)
		}
		return app
	}
	holder := func() int64 {
		t.Helper()
		pid, err := sqltest.HolderSession(ctx, l, name)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	for _, owner := range []string{"", "announce-host/7"} {
		ls, err := l.Acquire(ctx, name, &dlock.AcquireOptions{Owner: owner, NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		info, err := l.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		app := announced(holder())
		if owner == "" {
			if app != "" || !info.Held || info.Owner != "" || info.Fence != 0 {
				t.Errorf("without an Owner: application_name %q, inspect %+v; want nothing announced, held, owner and fence unknown", app, info)
			}
		} else if want := "dlock " + strconv.FormatUint(ls.Token(), 10) + " " + owner; app != want || !info.Held || info.Owner != owner || info.Fence != ls.Token() {
			t.Errorf("with an Owner: application_name %q, inspect %+v; want %q, held by %q with fence %d", app, info, want, owner, ls.Token())
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestForUpdatePoolFull: each forupdate lease pins a connection (its row
// lock lives in its transaction), so a Locker holds at most
// pool_max_conns of them at once; one more Acquire or TryAcquire, of a
// free name, waits for a connection and, when its context ends, fails
// with ErrPoolExhausted naming the pool's size and wrapping the
// context's error (dlockbench's scale leases=100 and 1000 rows meet it
// on the default pool of 32); a lease released gives its connection to
// the next attempt.
func TestForUpdatePoolFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const size = 3
	l := sqltest.Open(t, ctx, sqltest.WithParams(testenv.Postgres(t).URL, "strategy", "forupdate", "pool_max_conns", strconv.Itoa(size), "table", "poolfull"))
	prefix := "poolfull/" + strconv.FormatInt(time.Now().UnixNano(), 10) + "/"
	var held []*dlock.Lease
	for i := range size {
		ls, err := l.TryAcquire(ctx, prefix+strconv.Itoa(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	sqltest.PoolFull(t, ctx, l, prefix+"free", nil, size, fmt.Sprintf("beside %d forupdate leases", size))
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err := l.TryAcquire(ctx, prefix+"free", nil)
	if err != nil {
		t.Fatalf("an attempt after a lease's release: %v", err)
	}
	for _, ls := range append(held[1:], ls) {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
