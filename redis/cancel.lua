-- cancel.lua: a blocking acquire gives up (its ctx ended, or a request
-- failed): its queue entry goes, and a grant that reached it meanwhile is
-- handed to the next live waiter, so that nothing of the wait remains.
-- KEYS as grant.lua. ARGV[1] owner value, ARGV[2] publish command.
-- Returns 1 when it removed an entry or released a grant, 0 otherwise.
local removed = redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if redis.call('EXISTS', KEYS[3]) == 0 or not grantNext(ARGV[2], nil) then
    redis.call('DEL', KEYS[1])
  end
  return 1
end
return removed
