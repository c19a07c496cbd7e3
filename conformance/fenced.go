package conformance

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// ErrStaleToken is returned by Register.Write for a token lower than one
// the register has seen: the writer's lease has ended and a newer holder
// exists.
var ErrStaleToken = errors.New("conformance: stale fencing token")

// Register is a fenced resource: the storage side of fencing tokens
// (Kleppmann, "How to do distributed locking"). It accepts a write only
// with a token at least as high as every token it has seen, so a holder
// whose lease ended while it was paused cannot overwrite the work of the
// holder that came after it. A token equal to the highest seen is
// accepted: it is the current holder writing again.
//
// It is safe for concurrent use. The cross-process cases keep it in the
// parent process and apply the children's writes to it.
type Register struct {
	mu       sync.Mutex
	max      uint64
	value    any
	writes   int
	rejected int
}

// Write stores v if token is at least the highest token seen, and returns
// an error wrapping ErrStaleToken otherwise.
func (r *Register) Write(token uint64, v any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes++
	if token < r.max {
		r.rejected++
		return fmt.Errorf("%w: write with token %d after token %d", ErrStaleToken, token, r.max)
	}
	r.max, r.value = token, v
	return nil
}

// Read returns the highest token seen and the value last written.
func (r *Register) Read() (token uint64, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max, r.value
}

// Stats returns the number of writes and how many were rejected.
func (r *Register) Stats() (writes, rejected int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes, r.rejected
}

// OpKind is the kind of an operation in a fenced history.
type OpKind string

// The operations of the fenced-mutex model.
const (
	// OpAcquire: a grant (OK) or a failed attempt (not OK, ignored).
	OpAcquire OpKind = "acquire"
	// OpRelease: a release that succeeded (OK) or found the lease gone.
	OpRelease OpKind = "release"
	// OpLost: the holder learned that its lease ended without a release
	// (Done closed with ErrLockLost). Call is the earliest moment the
	// server could have dropped it, Return when the holder learned it.
	OpLost OpKind = "lost"
	// OpWrite: a write to the fenced register with Token, accepted (OK)
	// or rejected.
	OpWrite OpKind = "write"
)

// Op is one operation of a fenced history. Call and Return are
// nanoseconds on one monotonic clock; Return is -1 for an operation that
// never returned (its process died).
type Op struct {
	Client int
	Kind   OpKind
	Token  uint64
	OK     bool
	Call   int64
	Return int64
}

// History records operations for the fenced-mutex checker. It is safe for
// concurrent use.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewHistory returns an empty history whose clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now returns the history's clock reading.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Begin records the call of an operation; call the returned function with
// its outcome when it returns.
func (h *History) Begin(client int, kind OpKind) func(token uint64, ok bool) {
	call := h.Now()
	return func(token uint64, ok bool) {
		h.Add(Op{Client: client, Kind: kind, Token: token, OK: ok, Call: call, Return: h.Now()})
	}
}

// Add records a complete operation.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the operations recorded.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// FencedOptions tunes CheckFenced.
type FencedOptions struct {
	// Fencing: tokens must strictly increase across grants and an
	// accepted write must carry the latest grant's token. Without it only
	// the mutex part is checked.
	Fencing bool
	// Dir receives the HTML visualisation of a failing history ("" means
	// os.TempDir()).
	Dir string
	// Name is part of the visualisation's file name.
	Name string
	// Timeout bounds the search (default 30s); a search that times out
	// is not reported as a failure.
	Timeout time.Duration
}

// FencedError is a history that the fenced-mutex model cannot explain.
type FencedError struct {
	// Ops is the number of operations checked.
	Ops int
	// Visualization is the HTML file with porcupine's visualisation of
	// the history ("" when it could not be written).
	Visualization string
	// Model is "mutex" or "semaphore of N".
	Model string
}

func (e *FencedError) Error() string {
	if e.Visualization == "" {
		return fmt.Sprintf("conformance: the history of %d operations violates the fenced %s", e.Ops, e.Model)
	}
	return fmt.Sprintf("conformance: the history of %d operations violates the fenced %s; see %s", e.Ops, e.Model, e.Visualization)
}

// fencedState is the model's state: the holder (client, -1 when free) and
// its token, the highest token granted and the highest accepted by the
// register.
type fencedState struct {
	holder int
	token  uint64
	max    uint64
	wmax   uint64
}

// FencedModel returns the porcupine model of a fenced mutex: an acquire
// is legal only when the lock is free and (with fencing) its token is
// greater than every earlier one; a release or a loss only by the current
// holder; an accepted write only with the latest grant's token (without
// fencing: by the holder); a rejected write only with a token below one
// the register accepted.
func FencedModel(fencing bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return fencedState{holder: -1} },
		Step: func(state, input, output any) (bool, any) {
			s := state.(fencedState)
			op := input.(Op)
			ok := output.(bool)
			switch op.Kind {
			case OpAcquire:
				if !ok {
					return true, s
				}
				if s.holder != -1 || (fencing && op.Token <= s.max) {
					return false, s
				}
				s.holder, s.token = op.Client, op.Token
				s.max = max(s.max, op.Token)
				return true, s
			case OpRelease:
				if !ok {
					return true, s
				}
				if s.holder != op.Client || s.token != op.Token {
					return false, s
				}
				s.holder, s.token = -1, 0
				return true, s
			case OpLost:
				if s.holder == op.Client && s.token == op.Token {
					s.holder, s.token = -1, 0
				}
				return true, s
			case OpWrite:
				if !ok {
					return op.Token < s.wmax, s
				}
				if fencing {
					if op.Token != s.max || op.Token < s.wmax {
						return false, s
					}
				} else if s.holder != op.Client {
					return false, s
				}
				s.wmax = max(s.wmax, op.Token)
				return true, s
			}
			return false, s
		},
		DescribeOperation: describeOp,
		DescribeState: func(state any) string {
			s := state.(fencedState)
			if s.holder == -1 {
				return fmt.Sprintf("free (max token %d, register %d)", s.max, s.wmax)
			}
			return fmt.Sprintf("held by %d with token %d (register %d)", s.holder, s.token, s.wmax)
		},
	}
}

// describeOp is how porcupine's visualisation shows an operation of
// either model.
func describeOp(input, output any) string {
	op := input.(Op)
	res := "ok"
	if !output.(bool) {
		res = "refused"
	}
	return fmt.Sprintf("%s(token %d) → %s", op.Kind, op.Token, res)
}

// CheckFenced checks a history against the fenced-mutex model. It returns
// nil when the history is explained by the model (or the search timed
// out), and a *FencedError naming porcupine's HTML visualisation of the
// history otherwise.
func CheckFenced(ops []Op, opts FencedOptions) error {
	return checkModel(ops, FencedModel(opts.Fencing), "mutex", opts)
}
