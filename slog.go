package dlock

import (
	"context"
	"errors"
	"log/slog"
)

// NewSlogObserver returns an Observer that logs each Event to logger (nil:
// slog.Default()) with the message "dlock: <kind>" and these attributes,
// each present when it applies:
//
//	backend, strategy   the Locker's backend and strategy
//	name                the lock's or semaphore's name
//	permits             N, for a permit of a semaphore of N
//	id                  the Event.ID tying an acquisition to its lease
//	wait                true for Acquire, false for TryAcquire
//	woken, reentrant    Event.Woken, Event.Reentrant
//	token               the fencing token
//	elapsed             the wait, the refresh latency or the hold time
//	margin              how long before the local deadline a loss was seen
//	outcome             Event.Outcome
//	err                 the error
//	message             a client library's line
//
// Levels: a lost lease is Error; a failed refresh or release, an attempt
// that failed otherwise than "taken", cancelled or closed, and a client
// library's line are Warn; the Locker's close is Info; every other step
// (attempts, waits, grants, refreshes, releases) is Debug. At a level the
// logger does not enable, an event costs no allocation.
func NewSlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger}
}

type slogObserver struct{ l *slog.Logger }

// level is the event's level (see NewSlogObserver).
func level(e Event) slog.Level {
	switch e.Kind {
	case EventLost:
		return slog.LevelError
	case EventClientLog:
		return slog.LevelWarn
	case EventClosed:
		if e.Err != nil {
			return slog.LevelWarn
		}
		return slog.LevelInfo
	case EventRefresh:
		if e.Err != nil {
			return slog.LevelWarn
		}
	case EventReleased:
		if e.Err != nil && !errors.Is(e.Err, ErrClosed) {
			return slog.LevelWarn
		}
	case EventNotAcquired:
		if o := e.Outcome(); o == "error" || o == "lost" {
			return slog.LevelWarn
		}
	}
	return slog.LevelDebug
}

var slogMessages = func() (m [len(kindNames)]string) {
	for k, n := range kindNames {
		if n != "" {
			m[k] = "dlock: " + n
		}
	}
	return m
}()

func (o slogObserver) Observe(ctx context.Context, e Event) {
	lvl := level(e)
	if !o.l.Enabled(ctx, lvl) {
		return
	}
	msg := "dlock: unknown"
	if int(e.Kind) < len(slogMessages) && slogMessages[e.Kind] != "" {
		msg = slogMessages[e.Kind]
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String("backend", e.Backend))
	if e.Strategy != "" {
		attrs = append(attrs, slog.String("strategy", e.Strategy))
	}
	if e.Name != "" {
		attrs = append(attrs, slog.String("name", e.Name))
	}
	if e.Permits > 0 {
		attrs = append(attrs, slog.Int("permits", e.Permits))
	}
	if e.ID != 0 {
		attrs = append(attrs, slog.Uint64("id", e.ID))
	}
	switch e.Kind {
	case EventAttempt, EventWait, EventWake, EventGranted, EventNotAcquired:
		attrs = append(attrs, slog.Bool("wait", e.Wait))
	}
	if e.Woken {
		attrs = append(attrs, slog.Bool("woken", true))
	}
	if e.Reentrant {
		attrs = append(attrs, slog.Bool("reentrant", true))
	}
	if e.Token != 0 {
		attrs = append(attrs, slog.Uint64("token", e.Token))
	}
	switch e.Kind {
	case EventWake, EventGranted, EventNotAcquired, EventRefresh, EventLost, EventReleased:
		attrs = append(attrs, slog.Duration("elapsed", e.Elapsed))
	}
	if e.Kind == EventLost {
		attrs = append(attrs, slog.Duration("margin", e.Margin))
	}
	switch e.Kind {
	case EventNotAcquired, EventRefresh, EventLost, EventReleased, EventClosed:
		attrs = append(attrs, slog.String("outcome", e.Outcome()))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	if e.Message != "" {
		attrs = append(attrs, slog.String("message", e.Message))
	}
	o.l.LogAttrs(ctx, lvl, msg, attrs...)
}
