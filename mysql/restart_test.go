package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestAbandonAfterRestartKillsNoStranger: connection ids start again
// after a server restart, so the id of a lease's connection from before
// the restart may now name another client's session. A lease whose
// keep-alive fails after the restart abandons its connection; that must
// never end the session that now has its old id.
func TestAbandonAfterRestartKillsNoStranger(t *testing.T) {
	srv := testenv.NewMySQL(t, nil)
	for _, s := range []string{"forupdate", "getlock"} {
		t.Run(s, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			// Connections opened first push the lease's id up, so that
			// after the restart new connections reach it.
			pre := openDB(t, srv.DSN)
			var keep []*sql.Conn
			for range 20 {
				c, err := pre.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				keep = append(keep, c)
			}
			l := sqltest.Open(t, ctx, sqltest.WithParams(srv.URL, "strategy", s))
			ls, err := l.TryAcquire(ctx, "restart/"+s, &dlock.AcquireOptions{TTL: time.Minute, NoKeepAlive: true})
			if err != nil {
				t.Fatal(err)
			}
			old := sqltest.Core(l).Sessions()[0]
			for _, c := range keep {
				c.Close()
			}
			if err := srv.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			db := openDB(t, srv.DSN)
			var victim *sql.Conn
			for i := 0; victim == nil; i++ {
				c, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var id int64
				if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
					t.Fatal(err)
				}
				switch {
				case id == old:
					victim = c
				case id > old || i > 1000:
					t.Skipf("no new connection got the old id %d (now at %d)", old, id)
				default:
					defer c.Close()
				}
			}
			defer victim.Close()
			// The lease's next keep-alive finds its connection gone.
			if err := ls.Refresh(ctx); err == nil {
				t.Fatal("refresh after the restart succeeded")
			}
			l.Close() // waits for the abandoned connection's clean-up
			var one int
			if err := victim.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				t.Fatalf("the session that now has the lease's old id %d was ended: %v", old, err)
			}
		})
	}
}
