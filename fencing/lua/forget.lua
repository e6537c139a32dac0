-- forget: delete a fence record, for data that no lease will write again
-- (RedisGuard.Forget, RedisStore.Forget). A script like every other request
-- of the guards, so that one driver call runs them all.
--
-- KEYS[1]  the fence record
--
-- Returns the number of keys deleted, 0 or 1.
return redis.call('DEL', KEYS[1])
