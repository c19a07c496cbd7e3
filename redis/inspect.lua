-- inspect.lua: a lock's state without taking it.
-- KEYS[1] lock key, KEYS[2] fence counter
-- Returns {value or false, pttl, fence or false}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
