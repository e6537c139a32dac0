-- acquire: take the lease of one resource if it is free, and draw its fence.
--
-- KEYS[1]  lease key  <prefix>{<resource>}:lease  string "<owner>:<fence>" with a TTL
-- KEYS[2]  fence key  <prefix>{<resource>}:fence  integer counter, never expires
-- ARGV[1]  owner token (random, unique per logical acquire)
-- ARGV[2]  TTL in milliseconds
--
-- Returns {1, fence} when the lease is ours: newly taken (the counter is
-- incremented in the same step, so no lease ever exists without a fence), or
-- already ours because an earlier attempt with the same owner succeeded and its
-- reply was lost (then the TTL is reset and the same fence is returned: a retry
-- never creates a second holder or burns a second fence).
-- Returns {0, pttl} when another owner holds the lease; pttl is the time it has
-- left in milliseconds (-1 if someone stored the key without a TTL).
local cur = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. ':'
if cur then
  if string.sub(cur, 1, #mine) == mine then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(string.sub(cur, #mine + 1))}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], mine .. string.format('%d', fence), 'PX', ARGV[2])
return {1, fence}
