-- release.lua: free a lock this grant still holds and wake waiters.
-- KEYS[1] lock key, KEYS[2] waiter registry; same hash slot
-- ARGV[1] owner value
-- ARGV[2] publish command (PUBLISH or SPUBLISH), or '' not to wake anyone
--         (taking back a failed Redlock attempt)
-- ARGV[3] message (the grant's value, so that a waiter subscribed on
--         several Redlock nodes can drop duplicates)
-- ARGV[4] release channel prefix: Locker L is woken on ARGV[4]..':'..L
-- ARGV[5] how many registered Lockers to wake
-- Only the Lockers whose registration is oldest are woken (not every
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
  wakeNext(KEYS[2], ARGV[2], ARGV[4], ARGV[3], tonumber(ARGV[5]))
end
return 1
