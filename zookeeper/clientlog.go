package zookeeper

import "github.com/dlock-go/dlock/driver"

var _ driver.ClientLogger = (*locker)(nil)

// SetClientLog hands go-zookeeper's log lines to log, for a connection
// the driver opened from a URL (a connection given to OpenLocker logs as
// its owner configured it).
func (l *locker) SetClientLog(log func(line string)) {
	if l.clog != nil {
		l.clog.SetClientLog(log)
	}
}
