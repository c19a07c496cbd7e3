-- semaphore_release.lua: free the permit this grant holds and wake
-- waiters.
-- KEYS[1] holders, KEYS[2] tokens, KEYS[3] the number of permits N,
--         KEYS[4] waiter registry (as semaphore_acquire.lua)
-- ARGV[1] grant value
-- ARGV[2] publish command (PUBLISH or SPUBLISH), or '' not to wake anyone
-- ARGV[3] wake-up channel prefix: Locker L is woken on ARGV[3]..':'..L
-- ARGV[4] how many registered Lockers to wake
-- Only the Lockers registered longest ago are woken (their waiters try
-- again; one that loses registers again); the registry exists only while
-- some Locker waits, so a release with no waiter publishes nothing.
-- The script starts with wake.lua's wakeNext.
-- Returns 1 when released, 0 when the grant held no permit (never
-- granted, released already, or its lease ran out).
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) <= now then
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[3])
end
if ARGV[2] ~= '' then
  wakeNext(KEYS[4], ARGV[2], ARGV[3], ARGV[1], tonumber(ARGV[4]))
end
return 1
