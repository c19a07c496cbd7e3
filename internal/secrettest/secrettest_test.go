package secrettest

import "testing"

func TestSameShape(t *testing.T) {
	// The pair that made CI fail: the run with the password hit its
	// connect_timeout, the baseline hit -no-wait's budget.
	refused := "dlock: cannot open the lock service: open zk://u:xxxxx@127.0.0.1:1/dlock?connect_timeout=200ms: zookeeper: no session with 127.0.0.1:xxxxx within connect_timeout=200ms: context deadline exceeded; COMMAND not run"
	budget := "dlock: the lock service zk://u:xxxxx@127.0.0.1:1/dlock?connect_timeout=200ms did not answer within 1s (the budget of -no-wait); COMMAND not run"
	if SameShape(refused, budget, "1") {
		t.Errorf("two different messages have the same shape")
	}
	// A leak keeps the shape, so Leaks still judges it.
	leak, base := "open redis://u:pa?ss@h:1: denied", "open redis://u:QQQQQQQQQ@h:1: denied"
	if !SameShape(leak, base, "pa?ss") || !Leaks(leak, base, "pa?ss") {
		t.Errorf("a leaking pair: SameShape %v, Leaks %v; want true, true", SameShape(leak, base, "pa?ss"), Leaks(leak, base, "pa?ss"))
	}
	if !SameShape(refused, refused, "1") || Leaks(refused, refused, "1") {
		t.Errorf("a message against itself")
	}
}
