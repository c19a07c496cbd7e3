-- release.lua: free a Redlock lock this grant still holds and wake a
-- waiter.
-- KEYS[1] lock key; the waiter registry is KEYS[1]..REGISTRY and the
-- release channel prefix KEYS[1]..RELEASE (same hash slot): Locker L is
-- woken on KEYS[1]..RELEASE..':'..L
-- ARGV[1] owner value, also the message (the grant's value, so that a
--         waiter subscribed on several nodes can drop duplicates)
-- ARGV[2] publish command (PUBLISH), or '' not to wake anyone (taking
--         back a failed attempt)
-- Only the Locker whose registration is oldest is woken (not every
-- waiter: they would all race for the lock and all but one lose); a woken
-- waiter that loses registers again, a woken Locker that has no waiter
-- left passes the wake-up on (pass.lua). The registry exists only while
-- some Locker waits (it expires with its last registration), so a release
-- with no waiter costs one ZPOPMIN beyond the compare-and-delete, and
-- publishes nothing.
-- Returns 1 when released, 0 when the key is gone or holds another value.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' then
  wakeNext(KEYS[1] .. REGISTRY, ARGV[2], KEYS[1] .. RELEASE, ARGV[1], REDLOCK_WAKE)
end
return 1
