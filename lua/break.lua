-- break: an operator's forced release. (queue.lua is inserted at the line '--#queue'.)
-- Go: Client.breakLease in admin.go.
--
-- KEYS[1]  lease key  <prefix>{<resource>}:lease
-- KEYS[2]  fence key  <prefix>{<t>}:fences  the counter of the resource's slot
-- KEYS[3]  queue key  <prefix>{<resource>}:queue  (see queue.lua)
-- KEYS[4]  alive key  <prefix>{<resource>}:alive  (see queue.lua)
-- ARGV[1]  the fence of the lease to remove, in decimal; '0' for any lease
-- ARGV[2]  wake channel  <prefix>{<resource>}:wake
-- ARGV[3]  '1' on Redis Cluster (shard channel), else '0'
--
-- Reads the lease and, in the same step, deletes it if it exists and (when
-- ARGV[1] is not '0') has that fence; then wakes the first live waiter, as
-- release does. The fence counter is never touched, so the next holder gets
-- a larger fence than the removed one. The released key is not written
-- either: the removed holder's own Release reports a lost lease.
--
-- Returns {value, pttl, counter, waiters, removed}: the lease value found
-- ('' if none), its PTTL in ms (-2 if none, -1 if it had no expiry), the
-- fence counter (0 if absent), the number of queued waiters, and 1 if the
-- lease was deleted, else 0.
--#queue
local cur = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local counter = tonumber(redis.call('GET', KEYS[2])) or 0
local removed = 0
if cur and (ARGV[1] == '0' or string.match(cur, '^[^:]*:(%d+)') == ARGV[1]) then
  redis.call('DEL', KEYS[1])
  removed = 1
  wake(KEYS[3], KEYS[4], ARGV[2], ARGV[3])
end
return {cur or '', pttl, counter, redis.call('ZCARD', KEYS[3]), removed}
