// Package knownset is a bounded set of names a driver has found to exist
// on its server (a row, a parent node), safe for concurrent use: a driver
// that remembers them can skip the creation step on their next use and
// fall back to it when the server says the thing is gone after all.
package knownset

import "sync"

// Set holds up to its Max names; adding one more forgets them all at once
// (they are found again on their next use). The zero Set is empty.
type Set struct {
	// Max bounds the set (0: 4096).
	Max int

	mu sync.Mutex
	m  map[string]struct{}
}

// Has reports whether name was added and not forgotten since.
func (s *Set) Has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[name]
	return ok
}

// Add records name.
func (s *Set) Add(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.Max
	if limit <= 0 {
		limit = 4096
	}
	if s.m == nil || len(s.m) >= limit {
		s.m = make(map[string]struct{})
	}
	s.m[name] = struct{}{}
}

// Delete forgets name.
func (s *Set) Delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, name)
}
