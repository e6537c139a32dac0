-- semaphore_refresh: compare-and-renew of one permit. (queue.lua is
-- inserted at '--#queue', for its clock and grow.)
-- Go: Lease.refreshCall in shared_lease.go.
--
-- KEYS[1] permits, KEYS[2] holders, KEYS[3] lease: the name's kind (see semaphore.lua)
-- ARGV[1] owner token   ARGV[2] the permit   ARGV[3] TTL in ms
--
-- Returns 1 if the permit was ours and unexpired and now has the full TTL
-- again, else 0 (nothing is written then).
--#queue
local mine = ARGV[1] .. ':'
local v = redis.call('HGET', KEYS[2], ARGV[2])
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[2]))
if v and string.sub(v, 1, #mine) == mine and exp and exp > now_ms() then
  redis.call('ZADD', KEYS[1], 'XX', now_ms() + tonumber(ARGV[3]), ARGV[2])
  grow(KEYS[1], ARGV[3])
  grow(KEYS[2], ARGV[3])
  mark(KEYS[3], 'semaphore', ARGV[3])
  return 1
end
return 0
