package sqllock

import "github.com/dlock-go/dlock/driver"

var _ driver.ClientLogger = (*Locker)(nil)

// SetClientLog hands the client library's log lines to log when the pool
// has a logger of its own (a pool the driver opened from a URL).
func (l *Locker) SetClientLog(log func(line string)) {
	if c, ok := l.pool.(driver.ClientLogger); ok {
		c.SetClientLog(log)
	}
}
