-- acquire.lua: one attempt to take a lock, in one round trip.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] waiter registry (a
-- sorted set of Locker ids by expiry time); all in one hash slot
-- ARGV[1] owner value (unique per grant, then "|" and Request.Owner)
-- ARGV[2] TTL in milliseconds
-- ARGV[3] the caller's Locker id when it has waiters on this name (a
--         failed attempt registers it, so that a release wakes it), or ''
-- ARGV[4] how long a registration lasts, in milliseconds
-- ARGV[5] '1' when a granted attempt is the Locker's last waiter on the
--         name (its registration is removed)
-- Returns the token when granted (the fence counter after INCR), or
-- {pttl} when another owner holds the lock (pttl < 0: no expiry known).
-- A free lock costs SET and INCR, as the fenced floor's script.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.call('INCR', KEYS[2])
  if ARGV[5] == '1' and ARGV[3] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[3])
  end
  return token
end
-- A retried request whose first attempt was applied finds its own value:
-- it is granted, with the token the first attempt issued.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[5] == '1' and ARGV[3] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[3])
  end
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
if ARGV[3] ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
return {redis.call('PTTL', KEYS[1])}
