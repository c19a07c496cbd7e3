package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

type statusOpts struct {
	url     urlFlags
	json    bool
	timeout time.Duration
}

func newStatusFlags(o *statusOpts) *flag.FlagSet {
	if o == nil {
		o = new(statusOpts)
	}
	fs := flag.NewFlagSet("dlock status", flag.ContinueOnError)
	o.url.register(fs)
	fs.BoolVar(&o.json, "json", false, "print a JSON object; unknown fields are null")
	durationVar(fs, &o.timeout, "timeout", 10*time.Second, "give up (status 69) after `D`, seconds or a duration")
	fs.SetOutput(discard{})
	return fs
}

// statusReport is what "dlock status" prints. A nil pointer is a fact the
// backend cannot report.
type statusReport struct {
	Name         string  `json:"name"`
	Backend      string  `json:"backend"`
	Strategy     string  `json:"strategy"`
	SessionBound bool    `json:"session_bound"`
	Held         *bool   `json:"held"`
	Owner        *string `json:"owner"`
	TTLMillis    *int64  `json:"ttl_ms"`
	Fence        *uint64 `json:"fence"`
	Waiters      *int    `json:"waiters"`
	Unsupported  bool    `json:"-"`
}

func (c cli) status(args []string) int {
	var o statusOpts
	fs := newStatusFlags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.stdout, statusUsage())
			return 0
		}
		return c.usageError(err.Error())
	}
	switch {
	case fs.NArg() == 0:
		return c.usageError("missing lock NAME: " + statusSynopsis)
	case fs.NArg() > 1:
		return c.usageError(fmt.Sprintf("want one lock NAME, got %d arguments (flags go before NAME)", fs.NArg()))
	case o.timeout <= 0:
		return c.usageError(fmt.Sprintf("-timeout %v: want a positive duration", o.timeout))
	}
	name := fs.Arg(0)
	rawURL, err := c.resolveURL(o.url)
	if err != nil {
		return c.usageError(err.Error())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	l, err := dlock.Open(ctx, rawURL)
	if err != nil {
		return c.failf(openStatus(err), rawURL, "%s", openFailure(err))
	}
	defer l.Close()
	info, err := l.Inspect(ctx, name)
	rep, err := inspectReport(name, l.Capabilities(), info, err)
	if err != nil {
		return c.failf(openStatus(err), rawURL, "lock service failed: %s", errText(err))
	}
	if o.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return c.failf(exitUnavailable, rawURL, "write: %v", err)
		}
		return 0
	}
	rep.print(c.stdout)
	return 0
}

// inspectReport is the report for the result of Locker.Inspect: a backend
// that cannot inspect (ErrUnsupported) gives a report of unknowns, any
// other error is returned.
func inspectReport(name string, caps dlock.Capabilities, info dlock.Info, err error) (statusReport, error) {
	switch {
	case errors.Is(err, dlock.ErrUnsupported):
		rep := newStatusReport(name, caps, dlock.Info{Waiters: -1})
		rep.Held, rep.Owner, rep.TTLMillis, rep.Fence, rep.Unsupported = nil, nil, nil, nil, true
		return rep, nil
	case err != nil:
		return statusReport{}, err
	}
	return newStatusReport(name, caps, info), nil
}

// newStatusReport turns the backend's Info into facts and unknowns.
func newStatusReport(name string, caps dlock.Capabilities, info dlock.Info) statusReport {
	r := statusReport{Name: name, Backend: caps.Backend, Strategy: caps.Strategy, SessionBound: caps.SessionBound}
	held := info.Held
	r.Held = &held
	if held {
		if info.Owner != "" {
			r.Owner = &info.Owner
		}
		if info.TTL > 0 {
			ms := info.TTL.Milliseconds()
			r.TTLMillis = &ms
		}
	} else {
		none, zero := "", int64(0)
		r.Owner, r.TTLMillis = &none, &zero
	}
	if info.Fence != 0 {
		r.Fence = &info.Fence
	}
	if info.Waiters >= 0 {
		r.Waiters = &info.Waiters
	}
	return r
}

func (r statusReport) print(w io.Writer) {
	const unknown = "unknown"
	line := func(k, v string) { fmt.Fprintf(w, "%-9s%s\n", k+":", v) }
	line("lock", r.Name)
	line("backend", r.Backend+" ("+r.Strategy+")")
	switch {
	case r.Unsupported:
		line("held", unknown+" (this backend cannot inspect a lock without taking it)")
	case *r.Held:
		line("held", "yes")
	default:
		line("held", "no")
	}
	if r.Held != nil && *r.Held {
		owner := unknown
		if r.Owner != nil {
			owner = *r.Owner
		}
		line("owner", owner)
		switch {
		case r.TTLMillis != nil:
			line("expires", fmt.Sprintf("in %v unless its holder renews it", time.Duration(*r.TTLMillis)*time.Millisecond))
		case r.SessionBound:
			line("expires", "when its holder releases it or its session ends")
		default:
			line("expires", unknown)
		}
	} else if r.Unsupported {
		line("owner", unknown)
		line("expires", unknown)
	}
	fence := unknown
	if r.Fence != nil {
		fence = fmt.Sprintf("%d (the last fencing token issued)", *r.Fence)
	}
	line("fence", fence)
	waiters := unknown
	if r.Waiters != nil {
		waiters = fmt.Sprint(*r.Waiters)
	}
	line("waiters", waiters)
}
