-- confirm: record a fence drawn outside Redis (a FenceSource) in our lease,
-- only while the lease is still ours. A holder whose lease was still ours
-- after it drew its fence drew it before any later holder could acquire, so
-- fences from a monotonic source keep the holder order.
-- Go: acquisition.drawFences in grant.go.
--
-- KEYS[1]  lease key  <prefix>{<resource>}:lease
-- ARGV[1]  owner token
-- ARGV[2]  the drawn fence
-- ARGV[3]  TTL in milliseconds
--
-- Returns 1 if the lease was ours and now stores the fence (with the full
-- TTL again, and its holder description and waited-for mark as they were), 0 if it has expired or
-- belongs to another owner.
local cur = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. ':'
if cur and string.sub(cur, 1, #mine) == mine then
  -- Everything after the fence: the holder description and the mark that
  -- others wait for the lease (a NUL byte, see acquire.lua), either of
  -- which may be missing.
  local holder = string.match(cur, '^[^:]*:%d+(.*)$')
  redis.call('SET', KEYS[1], mine .. ARGV[2] .. holder, 'PX', ARGV[3])
  return 1
end
return 0
