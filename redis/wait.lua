-- wait.lua: a blocking acquire's attempt, and its waiter's renewal.
-- KEYS as grant.lua.
-- ARGV[1] owner value (unique per grant, then "|" and Request.Owner)
-- ARGV[2] TTL in milliseconds
-- ARGV[3] publish command (PUBLISH or SPUBLISH)
-- ARGV[4] the caller's grant channel
-- ARGV[5] how long the caller's queue entry lasts unless renewed, in ms
-- Returns the token when the caller holds the lock (taken now, or granted
-- earlier while its grant message was lost: then its TTL starts again
-- now), or {0} when it is queued (entry added at the back, or renewed in
-- place).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- The lock was free. Queued waiters go first (a holder expired without
  -- a release, or this is a queued waiter's renewal).
  if redis.call('EXISTS', KEYS[3]) == 0 then
    return redis.call('INCR', KEYS[2])
  end
  local v, token = grantNext(ARGV[3], ARGV[1])
  if not v then
    -- Nobody alive queued: the caller keeps it.
    return redis.call('INCR', KEYS[2])
  end
  if v == ARGV[1] then
    return token
  end
elseif redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Microseconds order the queue; NX keeps a renewing waiter's place.
redis.call('ZADD', KEYS[3], 'NX', now * 1000 + tonumber(t[2]) % 1000, ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], string.format('%d', now + tonumber(ARGV[5])) .. ' ' .. ARGV[2] .. ' ' .. ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
redis.call('PEXPIRE', KEYS[4], ARGV[5])
return {0}
