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
-- waiter that loses registers again. The registry exists only while some
-- Locker waits (it expires with its last registration), so a release
-- with no waiter costs one EXISTS beyond the compare-and-delete, and
-- publishes nothing.
-- Returns 1 when released, 0 when the key is gone or holds another value.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' and redis.call('EXISTS', KEYS[2]) == 1 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  local woken = redis.call('ZPOPMIN', KEYS[2], ARGV[5])
  for i = 1, #woken, 2 do
    redis.call(ARGV[2], ARGV[4] .. ':' .. woken[i], ARGV[3])
  end
end
return 1
