package knownset

import (
	"fmt"
	"sync"
	"testing"
)

// TestSet: a name added is known until it is deleted or the set fills,
// which forgets every name at once; the set never holds more than Max; concurrent use is safe
// (-race).
func TestSet(t *testing.T) {
	s := &Set{Max: 3}
	if s.Has("a") {
		t.Fatal("the empty set knows a")
	}
	for _, n := range []string{"a", "b", "c"} {
		s.Add(n)
	}
	if !s.Has("a") || !s.Has("c") {
		t.Fatal("a name added is not known")
	}
	s.Add("d")
	if s.Has("a") || !s.Has("d") {
		t.Fatal("a full set did not start again with the name added")
	}
	s.Delete("d")
	if s.Has("d") {
		t.Fatal("a name deleted is known")
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				n := fmt.Sprint(i, j)
				s.Add(n)
				_ = s.Has(n)
			}
		})
	}
	wg.Wait()
	if len(s.m) > 3 {
		t.Errorf("%d names held, Max is 3", len(s.m))
	}
}
