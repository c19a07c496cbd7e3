package etcd

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dlock-go/dlock/driver"
)

var _ driver.ClientLogger = (*locker)(nil)

// SetClientLog hands the etcd client's warnings and errors to log, for a
// client the driver opened from a URL (a client given to OpenLocker logs
// as its owner configured it).
func (l *locker) SetClientLog(log func(line string)) {
	if l.clog != nil {
		l.clog.SetClientLog(log)
	}
}

// zapLogger is the etcd client's logger when the driver opens it: its
// warnings and errors go to clog (dropped until SetClientLog), never to
// stderr.
func zapLogger(clog *driver.ClientLog) *zap.Logger {
	return zap.New(zapCore{clog: clog})
}

// zapCore passes each entry of Warn and above to clog as one line: the
// message and its fields.
type zapCore struct {
	clog   *driver.ClientLog
	fields []zapcore.Field
}

func (c zapCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c zapCore) With(fields []zapcore.Field) zapcore.Core {
	return zapCore{clog: c.clog, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c zapCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	if len(enc.Fields) == 0 {
		c.clog.Print(e.Message)
	} else {
		c.clog.Printf("%s %v", e.Message, enc.Fields)
	}
	return nil
}

func (zapCore) Sync() error { return nil }
