-- wake.lua: wakeNext, which the scripts that wake Redlock waiters start
-- with (release.lua, pass.lua).
-- Pops the Lockers registered longest ago in the waiter registry
-- (a sorted set of Locker ids by registration expiry, in milliseconds of
-- the server's clock) until n live ones are found, or none is left, and
-- publishes msg to each on prefix..':'..id with the command pub. The
-- expired entries it pops are dropped. A registry nobody is in costs one
-- ZPOPMIN; the server's clock is read only when an entry was found.
local function wakeNext(registry, pub, prefix, msg, n)
  local woken, now = 0, nil
  while woken < n do
    local e = redis.call('ZPOPMIN', registry)
    if #e == 0 then
      return
    end
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    if tonumber(e[2]) > now then
      redis.call(pub, prefix .. ':' .. e[1], msg)
      woken = woken + 1
    end
  end
end
