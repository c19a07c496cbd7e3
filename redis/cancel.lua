-- cancel.lua: a blocking acquire gives up (its ctx ended, or a request
-- failed): its queue entry goes, and a grant that reached it meanwhile is
-- handed to the next live waiter, so that nothing of the wait remains.
-- KEYS[1] lock key (the others derived from it, as grant.lua says).
-- ARGV[1] owner value.
-- Returns 1 when it removed an entry or released a grant, 0 otherwise.
local removed = redis.call('ZREM', KEYS[1] .. QUEUE, ARGV[1])
redis.call('HDEL', KEYS[1] .. DATA, ARGV[1])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if redis.call('EXISTS', KEYS[1] .. QUEUE) == 0 or not grantNext(nil) then
    redis.call('DEL', KEYS[1])
  end
  return 1
end
return removed
