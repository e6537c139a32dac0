-- fenced set: the body of RedisGuard.Set, run behind check.lua.
--
-- KEYS[1]  the data key
-- ARGV[1]  the value
-- ARGV[2]  TTL in milliseconds; '0' for none (the key's old TTL is dropped, as
--          by a plain SET)
--
-- Returns 1.
if ARGV[2] == '0' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
