package mysql

import "github.com/dlock-go/dlock/driver"

var _ driver.ClientLogger = (*pool)(nil)

// SetClientLog hands go-sql-driver's log lines to log, for a DB the
// driver opened from a URL (a DB given to OpenLocker logs as its owner
// configured it).
func (p *pool) SetClientLog(log func(line string)) {
	if p.log != nil {
		p.log.SetClientLog(log)
	}
}

// clientLog is driver.ClientLog (conn.go imports database/sql/driver).
type clientLog = driver.ClientLog
