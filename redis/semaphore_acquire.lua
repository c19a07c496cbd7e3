-- semaphore_acquire.lua: one attempt to take a permit of a semaphore, in
-- one round trip.
-- KEYS[1] holders (a sorted set: grant value by lease expiry, in ms of the
--         server's clock), KEYS[2] tokens (a hash: grant value -> token),
--         KEYS[3] the number of permits N, KEYS[4] fence counter, KEYS[5]
--         waiter registry (Locker ids by registration expiry); all in one
--         hash slot
-- ARGV[1] grant value (unique per grant)
-- ARGV[2] TTL in milliseconds
-- ARGV[3] N, the caller's number of permits (decimal)
-- ARGV[4] the caller's Locker id when it has waiters on this semaphore (a
--         failed attempt registers it, so that a release wakes it), or ''
-- ARGV[5] how long a registration lasts, in milliseconds
-- ARGV[6] '1' when a granted attempt is the Locker's last waiter on the
--         semaphore (its registration is removed)
-- Returns the token when granted (the fence counter after INCR); {ms}
-- when all N permits are held, ms until the first holder's lease ends;
-- {0, n} when the semaphore is in use with n permits, not ARGV[3] (the
-- attempt changed nothing).
-- Holders, tokens and N expire together, never before the latest
-- holder's lease: nothing outlives the semaphore's use but the fence.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local function unregister()
  if ARGV[6] == '1' and ARGV[4] ~= '' then
    redis.call('ZREM', KEYS[5], ARGV[4])
  end
end
-- A holder whose lease ran out holds nothing: trim it, and its token.
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #expired, 1000 do
    redis.call('HDEL', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
  end
end
-- A retried request whose first attempt was applied finds its own value:
-- it is granted, with the token the first attempt issued.
local mine = redis.call('HGET', KEYS[2], ARGV[1])
if mine then
  unregister()
  return tonumber(mine)
end
local held = redis.call('ZCARD', KEYS[1])
local stored = false
if held > 0 then
  local n = redis.call('GET', KEYS[3])
  stored = n ~= false
  if n and n ~= ARGV[3] then
    return {0, n}
  end
  if held >= tonumber(ARGV[3]) then
    if ARGV[4] ~= '' then
      redis.call('ZADD', KEYS[5], string.format('%d', now + tonumber(ARGV[5])), ARGV[4])
      redis.call('PEXPIRE', KEYS[5], ARGV[5])
    end
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {math.max(tonumber(first[2]) - now, 1)}
  end
end
-- PTTL before the grant: -2 when the semaphore was free (its keys gone).
local keep = redis.call('PTTL', KEYS[1])
redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), ARGV[1])
local token = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[2], ARGV[1], token)
if keep < ttl + 1 then
  local px = string.format('%d', ttl + 1)
  redis.call('PEXPIRE', KEYS[1], px)
  redis.call('PEXPIRE', KEYS[2], px)
  redis.call('SET', KEYS[3], ARGV[3], 'PX', px)
elseif not stored then
  -- N went missing while permits are held (a volatile-* eviction): store
  -- it again, with the holders' expiry.
  redis.call('SET', KEYS[3], ARGV[3], 'PX', keep)
end
unregister()
return token
