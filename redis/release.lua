-- release.lua: free a lock this grant still holds and wake its waiters.
-- KEYS[1] lock key, KEYS[2] release channel (same hash slot)
-- ARGV[1] owner value; ARGV[2] publish command (PUBLISH or SPUBLISH, or
-- empty: do not publish, for taking back a failed Redlock attempt);
-- ARGV[3] message (the grant's random id, so a waiter subscribed on
-- several Redlock nodes can drop duplicates)
-- Returns 1 when released, 0 when the key is gone or holds another value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call(ARGV[2], KEYS[2], ARGV[3])
  end
  return 1
end
return 0
