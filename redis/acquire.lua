-- acquire.lua: one attempt to take a lock, in one round trip.
-- KEYS[1] lock key, KEYS[2] fence counter (same hash slot)
-- ARGV[1] owner value (random per grant, then "|" and Request.Owner)
-- ARGV[2] TTL in milliseconds
-- Returns {1, token} when granted (the fence counter after INCR), or
-- {0, pttl} when another owner holds the lock (pttl < 0: no expiry known).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
-- A retried request whose first attempt was applied finds its own value:
-- it is granted, with the token the first attempt issued.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}
