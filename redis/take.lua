-- take.lua: take(), one attempt to take a lock, which the attempt
-- scripts start with (after keysHeader's constants): alone as a
-- TryAcquire's script (reply(take())), or with acquire.lua's waiter
-- registration. They take one key and derive the others from it, since
-- each key and argument the server parses and copies into the script's
-- tables costs it time on every acquire (Redlock pays it on every node,
-- and its nodes may share a CPU).
-- KEYS[1] lock key; the fence counter is KEYS[1]..FENCE (same hash slot)
-- ARGV[1] owner value (unique per grant, then "|" and Request.Owner)
-- ARGV[2] TTL in milliseconds
-- take returns true and the token when granted (the fence counter after
-- INCR), false and the holder's PTTL when another owner holds the lock
-- (< 0: no expiry known). A free lock costs SET and INCR.
local function take()
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return true, redis.call('INCR', KEYS[1] .. FENCE)
  end
  -- A retried request whose first attempt was applied finds its own
  -- value: it is granted, with the token the first attempt issued.
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    return true, tonumber(redis.call('GET', KEYS[1] .. FENCE) or '0')
  end
  return false, redis.call('PTTL', KEYS[1])
end

-- reply is an attempt's answer: the token when granted, {pttl} otherwise.
local function reply(granted, n)
  if granted then
    return n
  end
  return {n}
end
