-- take.lua: acquire.lua for an attempt that registers nobody (a
-- TryAcquire, or a Redlock attempt whose Locker has no waiter on the
-- name): the same answers from one key and two arguments, since each key
-- and argument the server parses and copies into the script's tables
-- costs it time on every acquire (Redlock pays it on every node, and its
-- nodes may share a CPU).
-- KEYS[1] lock key; the fence counter is KEYS[1]..FENCE (same hash slot)
-- ARGV[1] owner value, ARGV[2] TTL in milliseconds
-- Returns the token when granted, or {pttl} when another owner holds the
-- lock (pttl < 0: no expiry known). A free lock costs SET and INCR.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[1] .. FENCE)
end
-- A retried request whose first attempt was applied finds its own value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return tonumber(redis.call('GET', KEYS[1] .. FENCE) or '0')
end
return {redis.call('PTTL', KEYS[1])}
