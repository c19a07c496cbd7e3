package conformance

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock"
)

// contention is the shape of the cases that hammer one name from many
// goroutines on many Lockers (MutualExclusion, SemaphoreLimit): each of
// lockers × goroutines clients, rounds times, acquires, enters its
// critical section, writes its token to a fenced register, leaves, and
// releases. The cases differ only in what they acquire and what they
// count inside.
type contention struct {
	lockers, goroutines, rounds int
	// what follows "Acquire" and "Release" in a failure ("" or " of a permit").
	what string
	// acquire asks for the name on the li-th Locker.
	acquire func(li int) (*dlock.Lease, error)
	// enter runs after the grant; write is the register's write of the
	// holder's token; leave runs after it with its error. All three run
	// while the lease is held.
	enter func()
	write func(client int, tok uint64) error
	leave func(werr error)
	// fail reports a failure (see caseT.failUpTo).
	fail func(format string, args ...any)
}

// contend runs k's clients to the end and returns their history for the
// model. A release refused with ErrNotHeld is recorded as a loss at some
// time after the grant: the model frees the lease then, so only a real
// overlap fails.
func (c *caseT) contend(k contention) *History {
	hist := NewHistory()
	var wg sync.WaitGroup
	for li := range k.lockers {
		for g := range k.goroutines {
			client := li*k.goroutines + g
			wg.Go(func() {
				for range k.rounds {
					end := hist.Begin(client, OpAcquire)
					ls, err := k.acquire(li)
					if err != nil {
						end(0, false)
						k.fail("Acquire%s: %v", k.what, err)
						return
					}
					tok := ls.Token()
					end(tok, true)
					granted := hist.Now()
					k.enter()
					wend := hist.Begin(client, OpWrite)
					werr := k.write(client, tok)
					wend(tok, werr == nil)
					k.leave(werr)
					rend := hist.Begin(client, OpRelease)
					rerr := ls.Release(c.ctx)
					if errors.Is(rerr, dlock.ErrNotHeld) {
						hist.Add(Op{Client: client, Kind: OpLost, Token: tok, Call: granted, Return: hist.Now()})
					} else {
						rend(tok, rerr == nil)
					}
					if rerr != nil {
						k.fail("Release%s: %v", k.what, rerr)
					}
				}
			})
		}
	}
	wg.Wait()
	return hist
}

// failUpTo returns a function that reports a failure as c.Errorf does,
// from any goroutine, but only the first n of them: a broken driver in a
// loop would otherwise bury the report.
func (c *caseT) failUpTo(n int32) func(format string, args ...any) {
	var failures atomic.Int32
	return func(format string, args ...any) {
		if failures.Add(1) <= n {
			c.Errorf(format, args...)
		}
	}
}
