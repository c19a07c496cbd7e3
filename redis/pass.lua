-- pass.lua: a Redlock Locker that a release woke when none of its waiters
-- was left (its last one gave up just before, or the Locker's
-- registration outlived it) passes the wake-up on to the next registered
-- Locker, so that the release, which wakes one, is not lost on it.
-- KEYS[1] lock key, KEYS[2] waiter registry; same hash slot
-- ARGV[1] publish command (PUBLISH)
-- ARGV[2] message (the release's: a Locker woken by it already drops it)
-- ARGV[3] release channel prefix, as release.lua's
-- Nothing when the lock is taken again: its release wakes the next.
if redis.call('EXISTS', KEYS[1]) == 0 then
  wakeNext(KEYS[2], ARGV[1], ARGV[3], ARGV[2], 1)
end
return 0
