-- grant.lua: the part of wait.lua, handover.lua and cancel.lua that hands
-- a free lock to the first live waiter of the FIFO grant queue (it is
-- prepended to each of them, after queueHeader's constants). All of them
-- take one key, the lock key KEYS[1], and derive the name's other keys by
-- appending a suffix to it (so they share its hash tag, and its Cluster
-- slot): KEYS[1]..FENCE the fence counter, KEYS[1]..QUEUE the waiters'
-- grant values by arrival (a sorted set), KEYS[1]..DATA per value
-- "<expiry ms> <ttl ms> <channel>" (a hash). PUB is the publish command
-- (PUBLISH or SPUBLISH), ENTRY_LIFE how long a queue entry lasts unless
-- renewed, in milliseconds.
--
-- grantNext pops waiters from the head until it finds one whose entry has
-- not expired (a waiter renews its entry while it waits; a dead one's
-- is skipped), sets the lock key to that waiter's value with its TTL,
-- increments the fence and, unless the waiter is self (the caller),
-- publishes "<token>:<value>" with PUB on the waiter's channel.
-- Returns the value and the token, or nil when no live waiter is queued.
local function grantNext(self)
  local queue, data = KEYS[1] .. QUEUE, KEYS[1] .. DATA
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local head = redis.call('ZPOPMIN', queue)
    if #head == 0 then
      return nil
    end
    local v = head[1]
    local d = redis.call('HGET', data, v)
    redis.call('HDEL', data, v)
    if d then
      local exp, ttl, ch = string.match(d, '^(%d+) (%d+) (.*)$')
      if exp and tonumber(exp) > now then
        redis.call('SET', KEYS[1], v, 'PX', ttl)
        local token = redis.call('INCR', KEYS[1] .. FENCE)
        if v ~= self then
          redis.call(PUB, ch, string.format('%d', token) .. ':' .. v)
        end
        return v, token
      end
    end
  end
end
