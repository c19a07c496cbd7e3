-- acquire.lua: take.lua's attempt by a Redlock Locker that has waiters
-- on the name, registering it in the name's waiter registry
-- KEYS[1]..REGISTRY (a sorted set of Locker ids by expiry time, in
-- milliseconds of the server's clock) when the attempt fails, so that a
-- release wakes it; an attempt that registers nobody is take.lua alone.
-- KEYS[1], ARGV[1], ARGV[2] as take.lua's
-- ARGV[3] the caller's Locker id
-- ARGV[4] how long a registration lasts, in milliseconds
-- ARGV[5] '1' when a granted attempt is the Locker's last waiter on the
--         name (its registration is removed)
-- Returns as take.lua's script: the token, or {pttl}.
local granted, n = take()
local registry = KEYS[1] .. REGISTRY
if granted then
  if ARGV[5] == '1' then
    redis.call('ZREM', registry, ARGV[3])
  end
else
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', registry, now + tonumber(ARGV[4]), ARGV[3])
  redis.call('PEXPIRE', registry, ARGV[4])
end
return reply(granted, n)
