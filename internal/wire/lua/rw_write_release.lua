-- rw_write_release: compare-and-delete of the write lease; wakes the first
-- waiting writer, or else every waiting reader. (queue.lua is inserted at
-- '--#queue'.) Go: Lease.releaseCall in shared_lease.go.
--
-- KEYS[1] writer, KEYS[2] queue, KEYS[3] alive (the waiting writers),
-- KEYS[4] released  <prefix>{<resource>}:wreleased  the last released write lease
-- KEYS[5] readq (the waiting readers),
-- KEYS[6] readers (see rw_read.lua), KEYS[7] lease: the name's kind, free
--         again once no read or write lease is held and nobody waits (see
--         queue.lua)
-- ARGV[1] owner token   ARGV[2] wake channel   ARGV[3] '1' on Cluster
-- ARGV[4] the owner's queue member if it may be waiting, else ''
--
-- Returns 1 if our write lease was deleted (now, or by an earlier call whose
-- reply was lost), else 0; as release.lua, the lease is renamed to the
-- released key for the time it had left.
--#queue
local mine = ARGV[1] .. ':'
local deleted = 0
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #mine) == mine then
  redis.call('RENAME', KEYS[1], KEYS[4])
  deleted = 1
else
  local last = redis.call('GET', KEYS[4])
  if last and string.sub(last, 1, #mine) == mine then
    deleted = 2
  end
end
local left = 0
if ARGV[4] ~= '' then
  left = redis.call('ZREM', KEYS[2], ARGV[4])
  if left == 1 then
    redis.call('HDEL', KEYS[3], ARGV[4])
  end
end
if deleted == 1 or (left == 1 and not cur) then
  if first(KEYS[2], KEYS[3]) then
    wake(KEYS[2], KEYS[3], ARGV[2], ARGV[3])
  else
    wake_readers(KEYS[5], ARGV[2], ARGV[3])
  end
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  local held = redis.call('EXISTS', KEYS[1]) == 1 or (last[2] and tonumber(last[2]) > now_ms())
  unmark(KEYS[7], 'read/write', held, {KEYS[2], KEYS[5]})
end
return math.min(deleted, 1)
