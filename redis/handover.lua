-- handover.lua: release a lock this grant holds, handing it to the first
-- live waiter in the same script (one round trip from release to the
-- next holder).
-- KEYS[1] lock key (the others derived from it, as grant.lua says).
-- ARGV[1] owner value.
-- Returns 1 when released, 0 when the key is gone or holds another value.
-- With no waiter queued it costs GET, EXISTS and DEL.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('EXISTS', KEYS[1] .. QUEUE) == 0 or not grantNext(nil) then
  redis.call('DEL', KEYS[1])
end
return 1
