-- grant.lua: the part of wait.lua, handover.lua and cancel.lua that hands
-- a free lock to the first live waiter of the FIFO grant queue (it is
-- prepended to each of them). All of them take the same keys:
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] the waiters' grant
-- values by arrival (a sorted set), KEYS[4] per value "<expiry ms> <ttl
-- ms> <channel>" (a hash); all in one hash slot.
--
-- grantNext pops waiters from the head until it finds one whose entry has
-- not expired (a waiter renews its entry while it waits; a dead one's
-- is skipped), sets the lock key to that waiter's value with its TTL,
-- increments the fence and, unless the waiter is self (the caller),
-- publishes "<token>:<value>" with pubcmd on the waiter's channel.
-- Returns the value and the token, or nil when no live waiter is queued.
local function grantNext(pubcmd, self)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local head = redis.call('ZPOPMIN', KEYS[3])
    if #head == 0 then
      return nil
    end
    local v = head[1]
    local d = redis.call('HGET', KEYS[4], v)
    redis.call('HDEL', KEYS[4], v)
    if d then
      local exp, ttl, ch = string.match(d, '^(%d+) (%d+) (.*)$')
      if exp and tonumber(exp) > now then
        redis.call('SET', KEYS[1], v, 'PX', ttl)
        local token = redis.call('INCR', KEYS[2])
        if v ~= self then
          redis.call(pubcmd, ch, string.format('%d', token) .. ':' .. v)
        end
        return v, token
      end
    end
  end
end
