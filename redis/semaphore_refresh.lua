-- semaphore_refresh.lua: extend a permit this grant still holds; never
-- revive one whose lease ran out (another grant may have its place).
-- KEYS[1] holders, KEYS[2] tokens, KEYS[3] the number of permits N (as
--         semaphore_acquire.lua)
-- ARGV[1] grant value; ARGV[2] TTL in milliseconds
-- Returns 1 when extended, 0 when the grant holds no permit.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then
  return 0
end
if tonumber(s) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + ttl), ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl + 1 then
  local px = string.format('%d', ttl + 1)
  redis.call('PEXPIRE', KEYS[1], px)
  redis.call('PEXPIRE', KEYS[2], px)
  redis.call('PEXPIRE', KEYS[3], px)
end
return 1
