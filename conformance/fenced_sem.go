package conformance

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// MaxModelPermits is the largest semaphore CheckFencedSemaphore models.
const MaxModelPermits = 8

// SemRegister is a fenced resource guarded by a semaphore of N permits: it
// remembers the N highest tokens written and accepts a write only with a
// token at least as high as the lowest of them (or while fewer than N
// were written). A holder paused while its permit expired and N newer
// permits wrote cannot overwrite their work. (It may also refuse a live
// holder that outlasted N newer permits: a resource cannot tell holders
// from tokens alone; the checker treats a refusal as legal whenever the
// register's rule explains it.)
type SemRegister struct {
	mu       sync.Mutex
	n        int
	top      []uint64 // the highest tokens written, ascending, at most n
	writes   int
	rejected int
}

// NewSemRegister returns the register of a semaphore of n permits.
func NewSemRegister(n int) *SemRegister { return &SemRegister{n: max(n, 1)} }

// Write records a write with token, or returns an error wrapping
// ErrStaleToken when n higher tokens were written before.
func (r *SemRegister) Write(token uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes++
	if len(r.top) == r.n && token < r.top[0] {
		r.rejected++
		return fmt.Errorf("%w: write with token %d after %d newer permits wrote (lowest %d)", ErrStaleToken, token, r.n, r.top[0])
	}
	r.top = insertTop(r.top, token, r.n)
	return nil
}

// Stats returns the number of writes and how many were rejected.
func (r *SemRegister) Stats() (writes, rejected int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes, r.rejected
}

// insertTop adds t to the ascending set top, keeping its n highest.
func insertTop(top []uint64, t uint64, n int) []uint64 {
	i, found := slices.BinarySearch(top, t)
	if found {
		return top
	}
	top = slices.Insert(top, i, t)
	if len(top) > n {
		top = top[1:]
	}
	return top
}

// semState is the fenced-semaphore model's state. Arrays keep it
// comparable, as porcupine's default equality needs.
type semState struct {
	n       int
	holders [MaxModelPermits]semHolder
	count   int
	max     uint64
	wtop    [MaxModelPermits]uint64 // the register's highest tokens, ascending
	wcount  int
}

type semHolder struct {
	client int
	token  uint64
}

func (s *semState) holderIndex(client int, token uint64) int {
	for i := range s.count {
		if s.holders[i].client == client && s.holders[i].token == token {
			return i
		}
	}
	return -1
}

func (s *semState) remove(i int) {
	s.count--
	s.holders[i] = s.holders[s.count]
	s.holders[s.count] = semHolder{}
}

// FencedSemaphoreModel returns the porcupine model of a semaphore of n
// permits (1 ≤ n ≤ MaxModelPermits) guarding a SemRegister: an acquire is
// legal only while fewer than n hold and (with fencing) its token is
// greater than every earlier grant's; a release or a loss only by a
// holder; an accepted write only by a holder with its own token; a
// rejected write only when the register's rule refuses its token.
func FencedSemaphoreModel(n int, fencing bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return semState{n: n} },
		Step: func(state, input, output any) (bool, any) {
			s := state.(semState)
			op := input.(Op)
			ok := output.(bool)
			switch op.Kind {
			case OpAcquire:
				if !ok {
					return true, s
				}
				if s.count >= s.n || (fencing && op.Token <= s.max) {
					return false, s
				}
				s.holders[s.count] = semHolder{op.Client, op.Token}
				s.count++
				s.max = max(s.max, op.Token)
				return true, s
			case OpRelease:
				if !ok {
					return true, s
				}
				i := s.holderIndex(op.Client, op.Token)
				if i < 0 {
					return false, s
				}
				s.remove(i)
				return true, s
			case OpLost:
				if i := s.holderIndex(op.Client, op.Token); i >= 0 {
					s.remove(i)
				}
				return true, s
			case OpWrite:
				refused := s.wcount == s.n && op.Token < s.wtop[0]
				if !ok {
					return refused, s
				}
				if refused || s.holderIndex(op.Client, op.Token) < 0 {
					return false, s
				}
				top := insertTop(slices.Clone(s.wtop[:s.wcount]), op.Token, s.n)
				s.wcount = copy(s.wtop[:], top)
				return true, s
			}
			return false, s
		},
		DescribeOperation: describeOp,
		DescribeState: func(state any) string {
			s := state.(semState)
			tokens := make([]uint64, s.count)
			for i := range s.count {
				tokens[i] = s.holders[i].token
			}
			return fmt.Sprintf("%d of %d held, tokens %v (max %d, register %v)", s.count, s.n, tokens, s.max, s.wtop[:s.wcount])
		},
	}
}

// CheckFencedSemaphore checks a history of a semaphore of n permits
// guarding a SemRegister against FencedSemaphoreModel, as CheckFenced
// does for a lock: nil when the model explains it (or the search timed
// out), a *FencedError naming the visualisation otherwise.
func CheckFencedSemaphore(ops []Op, n int, opts FencedOptions) error {
	if n < 1 || n > MaxModelPermits {
		return fmt.Errorf("conformance: CheckFencedSemaphore models 1 to %d permits, not %d", MaxModelPermits, n)
	}
	return checkModel(ops, FencedSemaphoreModel(n, opts.Fencing), fmt.Sprintf("semaphore of %d", n), opts)
}

// checkModel runs porcupine over ops with model (CheckFenced's and
// CheckFencedSemaphore's common part).
func checkModel(ops []Op, model porcupine.Model, what string, opts FencedOptions) error {
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	var last int64
	for _, op := range ops {
		last = max(last, op.Call, op.Return)
	}
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		if op.Kind == OpAcquire && !op.OK {
			continue // tells nothing about the state
		}
		ret := op.Return
		if ret < 0 {
			ret = math.MaxInt64 / 2
			if last < ret {
				ret = last + 1
			}
		}
		hist = append(hist, porcupine.Operation{
			ClientId: op.Client, Input: op, Call: op.Call, Output: op.OK, Return: ret,
		})
	}
	res, info := porcupine.CheckOperationsVerbose(model, hist, opts.Timeout)
	if res != porcupine.Illegal {
		return nil
	}
	fe := &FencedError{Ops: len(hist), Model: what}
	dir := opts.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	name := opts.Name
	if name == "" {
		name = "history"
	}
	f, err := os.CreateTemp(dir, "fenced-"+filepath.Base(name)+"-*.html")
	if err == nil {
		path := f.Name()
		if err := porcupine.Visualize(model, info, f); err == nil {
			fe.Visualization = path
		}
		f.Close()
	}
	return fe
}
