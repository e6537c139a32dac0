-- fenced del: the body of RedisGuard.Del, run behind check.lua. The
-- fence record stays, so a stale holder cannot recreate the key afterwards.
--
-- KEYS[1]  the data key
--
-- Returns the number of keys deleted: 1, or 0 if the key did not exist.
return redis.call('DEL', KEYS[1])
