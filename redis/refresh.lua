-- refresh.lua: extend a lock this grant still holds; never re-create one.
-- KEYS[1] lock key; ARGV[1] owner value; ARGV[2] TTL in milliseconds
-- Returns 1 when extended, 0 when the key is gone or holds another value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
