package mysql_test

import (
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/sqllock/sqltest"
	"github.com/dlock-go/dlock/internal/testenv"
	_ "github.com/dlock-go/dlock/mysql"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func TestBasic(t *testing.T) {
	srv := testenv.MySQL(t)
	for _, s := range sqltest.Strategies("getlock") {
		t.Run(s, func(t *testing.T) { sqltest.Basic(t, sqltest.WithParams(srv.URL, "strategy", s)) })
	}
}

func TestConformance(t *testing.T) {
	srv := testenv.MySQL(t)
	sqltest.Conformance(t, srv.URL, srv.Addr, sqltest.Strategies("getlock"), conformance.WithTTL(time.Second))
}
