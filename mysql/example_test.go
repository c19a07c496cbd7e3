package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/mysql"
)

// Open by URL, in either form.
func Example() {
	ctx := context.Background()
	for _, u := range []string{
		"mysql://app:secret@127.0.0.1:3306/app?strategy=getlock",
		"mysql://app:secret@tcp(127.0.0.1:3306)/app?strategy=forupdate&tls=true",
	} {
		l, err := dlock.Open(ctx, u)
		if err != nil {
			log.Fatal(err)
		}
		l.Close()
	}
}

// A Locker on the application's *sql.DB, with the fenced write on the
// application's table.
func ExampleFencedUpdate() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/app?interpolateParams=true&multiStatements=true")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l, err := mysql.OpenLocker(db, &mysql.Options{MultiStatements: true})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	// dlock.Do holds the lock while the function runs and releases it
	// after; its ctx ends if the lease is lost.
	err = dlock.Do(ctx, l, "account/7", nil, func(ctx context.Context, lease *dlock.Lease) error {
		ok, err := mysql.FencedUpdate(ctx, db, "accounts", "fence", lease.Token(), "balance = balance - ?", "id = ?", 100, 7)
		if err == nil && !ok {
			err = errors.New("stale token: a newer holder has written since")
		}
		return err
	})
	if err != nil {
		log.Print(err)
	}
}
