package redis

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// go-redis has one logger per process (goredis.SetLogger), not one per
// client. This package installs Logger() in its init: it prints every line
// exactly as go-redis's default logger does (to stderr, "redis: " prefix,
// the go-redis source line), except the failed dials of the clients that
// dlock opened from a URL, which go to their Locker's Observer (and are
// dropped when it has none). A program that calls goredis.SetLogger
// afterwards replaces it, as it would replace go-redis's default.
func init() { goredis.SetLogger(std) }

var std = &routedLogger{std: log.New(os.Stderr, "redis: ", log.LstdFlags|log.Lshortfile)}

// Logger returns the go-redis logger this package installs when it is
// imported (see the package documentation, # Logs): go-redis's default
// behaviour, except that a Locker's own failed dials go to its Observer
// instead of stderr. A program that replaced it can put it back with
// goredis.SetLogger(redis.Logger()).
func Logger() interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return std
}

type routedLogger struct{ std *log.Logger }

func (r *routedLogger) Printf(ctx context.Context, format string, v ...any) {
	for _, a := range v {
		var de *dialError
		if err, ok := a.(error); ok && errors.As(err, &de) {
			de.log.Printf(format, v...)
			return
		}
	}
	// As go-redis's default: 3 frames up is the line that logged (through
	// go-redis's forwarding Printf and this one).
	_ = r.std.Output(3, fmt.Sprintf(format, v...))
}

// dialError is a failed dial of a client dlock opened: go-redis logs it
// (after its retries) with the error as an operand, which tells
// routedLogger whose line it is.
type dialError struct {
	err error
	log *driver.ClientLog
}

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// routeDialErrors wraps go-redis's dialer so that its errors name log.
func routeDialErrors(dial func(ctx context.Context, network, addr string) (net.Conn, error), log *driver.ClientLog) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, &dialError{err: err, log: log}
		}
		return c, nil
	}
}

var (
	_ driver.ClientLogger = (*locker)(nil)
	_ driver.ClientLogger = (*redlock)(nil)
)

// SetClientLog hands the failed dials of a client opened from a URL to log.
func (l *locker) SetClientLog(log func(line string)) {
	if l.clog != nil {
		l.clog.SetClientLog(log)
	}
}

// SetClientLog hands the failed dials of clients opened from a URL to log.
func (r *redlock) SetClientLog(log func(line string)) {
	if r.clog != nil {
		r.clog.SetClientLog(log)
	}
}

// ClientLog returns a logger for go-redis that hands every line of every
// go-redis client of the program (the application's own included) to obs
// as a dlock.EventClientLog of backend "redis", instead of writing it to
// stderr:
//
//	goredis.SetLogger(redis.ClientLog(obs))
//
// Without it, only the failed dials of the clients dlock opened from a URL
// go to their Locker's Observer (see Logger).
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
