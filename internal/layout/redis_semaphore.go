package layout

// RedisSemaphore are the keys and channels of one semaphore name. They
// share the hash tag of the lock of the same name (so, in a Redis Cluster,
// its slot), and every one of them carries the ":s" suffix after the tag,
// which no lock key or channel has: the semaphore "x" and the lock "x" are
// a namespace apart, whatever the prefix (a prefix has no '{', so the tag
// and what follows it are found unambiguously in any key).
type RedisSemaphore struct {
	Holders string // <prefix>{<name>}:s: the holders' grant values, scored by expiry (ms, server clock)
	Tokens  string // <prefix>{<name>}:s:t: per grant value, its token
	Permits string // <prefix>{<name>}:s:n: the number of permits N, while any permit is held
	Fence   string // <prefix>{<name>}:s:fence: the INCR fencing counter, never expires
	Queue   string // <prefix>{<name>}:s:q: Lockers with waiters, by registration expiry
	Channel string // <prefix>{<name>}:s:rel: Locker L is woken on <channel>:L
}

// RedisSemaphoreKeys returns the keys of the semaphore name under prefix.
// Holders, Tokens and Permits expire together, no earlier than the latest
// holder's expiry; Fence never expires.
func RedisSemaphoreKeys(prefix, name string) RedisSemaphore {
	h := prefix + "{" + RedisTag(name) + "}:s"
	return RedisSemaphore{
		Holders: h,
		Tokens:  h + ":t",
		Permits: h + ":n",
		Fence:   h + ":fence",
		Queue:   h + ":q",
		Channel: h + ":rel",
	}
}
