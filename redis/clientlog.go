package redis

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
)

// ClientLog returns a logger for go-redis that hands each line to obs as
// a dlock.EventClientLog of backend "redis", instead of writing it to
// stderr:
//
//	goredis.SetLogger(redis.ClientLog(obs))
//
// go-redis has one logger per process (SetLogger), not one per client:
// it logs for every go-redis client of the program, the application's own
// included. That is why this package never installs it by itself, and why
// a broken connection of a Locker opened from a URL prints go-redis's
// "redis: ... failed to dial after 5 attempts" on stderr until the program
// calls SetLogger (with this logger, or go-redis's logging.VoidLogger to
// drop the lines).
func ClientLog(obs dlock.Observer) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return clientLog{obs}
}

type clientLog struct{ obs dlock.Observer }

func (c clientLog) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	c.obs.Observe(ctx, dlock.Event{Kind: dlock.EventClientLog, Backend: "redis", Message: fmt.Sprintf(format, v...)})
}
