package faults

// Times in a History are nanoseconds on the parent's monotonic clock since
// the start of the run. Client processes never supply a time: the parent
// timestamps each line it receives, and converts a client's own durations
// (how long after its acquire call a lease's Done closed) into upper bounds
// on its clock.

// Op is one call made by a client, as the parent saw it.
type Op struct {
	Client int    `json:"client"`
	Kind   string `json:"kind"` // acquire, release, write
	Lease  int    `json:"lease,omitempty"`
	// Call is when the parent received the "about to call" line, at or
	// before the call; Return when it received the result, at or after
	// it. Return is -1 when the call never returned (its process died or
	// the run ended).
	Call    int64  `json:"call"`
	Return  int64  `json:"return"`
	OK      bool   `json:"ok"`
	Token   uint64 `json:"token,omitempty"`
	Err     string `json:"err,omitempty"`
	ErrKind string `json:"err_kind,omitempty"`
}

// LeaseRec is one grant, from the acquire that returned it to the moment
// its holder stopped believing it held the lock.
type LeaseRec struct {
	Client int    `json:"client"`
	Seq    int    `json:"seq"`
	Token  uint64 `json:"token"`
	// Called is when the acquire that granted it was called (the earliest
	// the server could have granted, or then dropped, it); Granted when
	// the parent received its result.
	Called  int64 `json:"called"`
	Granted int64 `json:"granted"`
	// callHi is an upper bound of the acquire call on the parent's clock.
	callHi int64
	// End is when the holder stopped believing it held the lock: its
	// release call, the (upper bound of the) moment its lease was
	// signalled lost, or its process being killed. -1 while open.
	End    int64  `json:"end"`
	EndHow string `json:"end_how"` // released, lost, killed, open
	// Lost: the lease ended without its holder releasing it (Done closed
	// with ErrLockLost, or the release found it no longer held).
	Lost bool `json:"lost"`
	// Signalled is the upper bound of when the loss became known to the
	// holder: Done closing, or the local lease deadline passing (for a
	// paused process that could not run its timer). -1 when never.
	Signalled int64  `json:"signalled"`
	DoneErr   string `json:"done_err,omitempty"`
	// DoneAt is the upper bound of when Done closed (-1: never reported);
	// Deadline that of the lease's last local deadline (-1: none).
	DoneAt   int64 `json:"done_at"`
	Deadline int64 `json:"deadline"`
	// DoneKind and ReleaseKind classify Done's Err and the release's
	// error (lost, released, not-held, ...).
	DoneKind    string `json:"done_kind,omitempty"`
	ReleaseKind string `json:"release_kind,omitempty"`
	relCall     int64  // -1 until release called
}

// Event is a fault injected by the parent.
type Event struct {
	At     int64  `json:"at"`
	Fault  string `json:"fault"`
	Client int    `json:"client,omitempty"` // victim, 0 when none
	Detail string `json:"detail,omitempty"`
	// Violation: the fault itself saw a promise broken (Detail says which).
	Violation bool `json:"violation,omitempty"`
	// Victim is the lease its client held when the fault hit (holder
	// faults), or nil.
	victim *LeaseRec
	// recover is set for faults after which recovery is measured
	// (the holder killed or paused).
	recover bool
}

// History is everything recorded in one run.
type History struct {
	Ops    []Op        `json:"ops"`
	Leases []*LeaseRec `json:"leases"`
	Events []Event     `json:"events"`
	// Injections counts the times the fault was injected.
	Injections int `json:"injections"`
	// InjectErrors are the injections that could not be made (nobody
	// held the lock, a server did not come back).
	InjectErrors []string `json:"inject_errors,omitempty"`
	// End is the time the run stopped.
	End int64 `json:"end"`
}
