package postgres_test

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	_ "github.com/dlock-go/dlock/postgres"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func TestBasic(t *testing.T) {
	srv := testenv.Postgres(t)
	for _, s := range sqltest.Strategies("advisory") {
		t.Run(s, func(t *testing.T) { sqltest.Basic(t, sqltest.WithParams(srv.URL, "strategy", s)) })
	}
}
