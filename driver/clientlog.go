package driver

import (
	"fmt"
	"sync/atomic"
)

// ClientLogger is implemented by a driver whose client library writes log
// lines of its own (go-sql-driver's "[mysql] packets.go:58 unexpected EOF"
// when a connection breaks). A driver that opened its client from a URL
// keeps those lines from the program's stderr: until the Locker calls
// SetClientLog, and when it never does (no Observer), they are dropped.
// The Locker calls SetClientLog once, before any other method, with a
// function that passes each line on to its Observer.
type ClientLogger interface {
	SetClientLog(log func(line string))
}

// ClientLog is the logger a driver gives its client library: it drops
// every line until SetClientLog installs a sink, then passes each line to
// the sink with the secrets of the URL it was made for hidden (Scrub). It
// has the Print method of go-sql-driver's Logger and the Printf method of
// go-zookeeper's. The zero value has no URL to scrub; use NewClientLog.
type ClientLog struct {
	raw  string
	sink atomic.Pointer[func(string)]
}

var _ ClientLogger = (*ClientLog)(nil)

// NewClientLog returns a ClientLog for a client opened from the URL raw.
func NewClientLog(raw string) *ClientLog { return &ClientLog{raw: raw} }

// SetClientLog installs the sink (nil drops lines again).
func (c *ClientLog) SetClientLog(log func(line string)) {
	if log == nil {
		c.sink.Store(nil)
		return
	}
	c.sink.Store(&log)
}

// Print logs its operands formatted as fmt.Sprint does.
func (c *ClientLog) Print(v ...any) {
	if p := c.sink.Load(); p != nil {
		(*p)(Scrub(fmt.Sprint(v...), c.raw))
	}
}

// Printf logs its operands formatted as fmt.Sprintf does.
func (c *ClientLog) Printf(format string, v ...any) {
	if p := c.sink.Load(); p != nil {
		(*p)(Scrub(fmt.Sprintf(format, v...), c.raw))
	}
}
