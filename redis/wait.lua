-- wait.lua: a blocking acquire's attempt, and its waiter's renewal.
-- KEYS[1] lock key (the others derived from it, as grant.lua says).
-- ARGV[1] owner value (unique per grant, then "|" and Request.Owner)
-- ARGV[2] TTL in milliseconds
-- ARGV[3] the caller's grant channel
-- Returns the token when the caller holds the lock (taken now, or granted
-- earlier while its grant message was lost: then its TTL starts again
-- now), or {0} when it is queued (entry added at the back, or renewed in
-- place).
-- A free lock with nobody queued costs SET, EXISTS and INCR.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- The lock was free. Queued waiters go first (a holder expired without
  -- a release, or this is a queued waiter's renewal).
  if redis.call('EXISTS', KEYS[1] .. QUEUE) == 0 then
    return redis.call('INCR', KEYS[1] .. FENCE)
  end
  local v, token = grantNext(ARGV[1])
  if not v then
    -- Nobody alive queued: the caller keeps it.
    return redis.call('INCR', KEYS[1] .. FENCE)
  end
  if v == ARGV[1] then
    return token
  end
elseif redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[1] .. FENCE) or '0')
end
local queue, data = KEYS[1] .. QUEUE, KEYS[1] .. DATA
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Microseconds order the queue; NX keeps a renewing waiter's place.
redis.call('ZADD', queue, 'NX', now * 1000 + tonumber(t[2]) % 1000, ARGV[1])
redis.call('HSET', data, ARGV[1], string.format('%d', now + ENTRY_LIFE) .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
redis.call('PEXPIRE', queue, ENTRY_LIFE)
redis.call('PEXPIRE', data, ENTRY_LIFE)
return {0}
