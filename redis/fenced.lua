-- The resource side of fencing: a write to the hash KEYS[1] that applies
-- only if the caller's token is not older than the last token applied to
-- it, which the hash keeps in its field ARGV[1].
--
-- ARGV: fence field, token (decimal uint64), op ("set" or "incr"),
--       field, value (set: a string; incr: a decimal int64 delta).
-- Returns {1, result} when applied (result: "OK" for set, the new value
-- for incr), {0, last token} when refused.
--
-- Tokens are compared as decimal strings (length, then bytes): a Lua
-- number is a double and would confuse tokens above 2^53.
local last = redis.call('HGET', KEYS[1], ARGV[1])
if last then
	local t = ARGV[2]
	if #last > #t or (#last == #t and last > t) then
		return {0, last}
	end
end
local res
if ARGV[3] == 'incr' then
	res = redis.call('HINCRBY', KEYS[1], ARGV[4], ARGV[5])
else
	redis.call('HSET', KEYS[1], ARGV[4], ARGV[5])
	res = 'OK'
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {1, res}
