package dlock

// GateState reports the gate's entry of name on l: whether it exists, how
// many Acquires wait locally, and how many entries l's gate holds in all.
func GateState(l *Locker, name string) (exists bool, queued, entries int) {
	for i := range l.gates.shards {
		s := &l.gates.shards[i]
		s.mu.Lock()
		entries += len(s.m)
		if e := s.m[name]; e != nil {
			exists, queued = true, len(e.queue)
		}
		s.mu.Unlock()
	}
	return exists, queued, entries
}

// KeeperArms reports how many times l's keep-alive timer was armed.
func KeeperArms(l *Locker) int {
	l.keeper.mu.Lock()
	defer l.keeper.mu.Unlock()
	return l.keeper.arms
}
