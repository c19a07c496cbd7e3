package main

import (
	"context"

	gomysql "github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"
)

// The client libraries log connection retries and the like to standard
// error on their own. dlock's contract is one line on standard error for
// each outcome of its own, so their loggers are silenced: every failure
// that matters reaches dlock as an error and is reported once.
func init() {
	goredis.SetLogger(quietLogger{})
	_ = gomysql.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
func (quietLogger) Print(...any)                           {}
