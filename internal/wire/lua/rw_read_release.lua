-- rw_read_release: compare-and-release of a read lease; the last reader out
-- wakes the first waiting writer. (queue.lua is inserted at '--#queue'.)
-- Go: Lease.releaseCall in shared_lease.go.
--
-- KEYS[1] readers, KEYS[2] queue, KEYS[3] alive (the waiting writers),
-- KEYS[4] readq (the waiting readers),
-- KEYS[5] readrel  <prefix>{<resource>}:readrel  ZSET owner -> the expiry its
--                  read lease had when released: recognises a retried
--                  release for the time the lease had left
-- KEYS[6] readinfo (see rw_read.lua): the owner's entry goes with it
-- KEYS[7] lease: the name's kind, free again once no read or write lease is
--         held and nobody waits (see queue.lua)
-- ARGV[1] owner token   ARGV[2] wake channel   ARGV[3] '1' on Cluster
-- ARGV[4] the owner's reader-queue member if it may be waiting, else ''
--
-- Returns 1 if our read lease was released (now, or by an earlier call whose
-- reply was lost), else 0.
--#queue
local now = now_ms()
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
local released = 0
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
if exp and exp > now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  -- Its fence and holder go too: rw_read.lua trims only readers still in
  -- readers, and each new reader lengthens readinfo's TTL, so an entry left
  -- here would stay for as long as readers overlap.
  redis.call('HDEL', KEYS[6], ARGV[1])
  redis.call('ZADD', KEYS[5], exp, ARGV[1])
  grow(KEYS[5], exp - now)
  released = 1
elseif redis.call('ZSCORE', KEYS[5], ARGV[1]) then
  released = 2
end
if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[4], ARGV[4])
end
if released == 1 then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local readers = last[2] and tonumber(last[2]) > now_ms()
  if not readers then
    wake(KEYS[2], KEYS[3], ARGV[2], ARGV[3])
  end
  -- The writer key is not this call's: a write lease holds the name's mark
  -- for as long as it lives, so only readers and waiters count here.
  unmark(KEYS[7], 'read/write', readers, {KEYS[2], KEYS[4]})
end
return math.min(released, 1)
