-- rw_read: take a read lease: shared with other readers, never with a
-- writer. (queue.lua is inserted at the line '--#queue'.)
-- Go: acquisition.attempt in grant.go, shared_lease.go.
--
-- KEYS[1] writer    <prefix>{<resource>}:writer    "<owner>:<fence>[:<holder>]" with a TTL
-- KEYS[2] readers   <prefix>{<resource>}:readers   ZSET owner -> expiry, server ms
--                   (a lapsed reader is kept until trimmed)
-- KEYS[3] readinfo  <prefix>{<resource>}:readinfo  HASH owner -> "<fence>[:<holder>]"
-- KEYS[4] fence     <prefix>{<t>}:fences
-- KEYS[5] queue, KEYS[6] alive: the waiting writers (see queue.lua)
-- KEYS[7] readq     <prefix>{<resource>}:readq     ZSET member -> deadline, server ms:
--                   the waiting readers, woken together by a writer's release
-- KEYS[8] lease     <prefix>{<resource>}:lease     the name's kind (see queue.lua)
-- ARGV[1] owner token   ARGV[2] TTL in ms   ARGV[3] waiter timeout in ms (0: do not wait)
-- ARGV[4] the owner's queue member   ARGV[5] the value's tail (acquire.lua's ARGV[5])
--
-- Writers first: a reader is refused while a writer holds the lease or a
-- live writer waits for it, so a stream of readers cannot starve a writer.
-- Each taking trims at most two readers that lapsed, so the work does not
-- grow with them (a released reader leaves readers and readinfo at once:
-- see rw_read_release.lua). Returns {1, fence} when the owner holds a
-- read lease (newly, or from an attempt whose reply was lost), or
-- {0, pttl, first, holder}: pttl the writer's time left (0 while a writer
-- waits), first 1 when the reader should wake at pttl, holder the writer's
-- description; the error reply 'WRONGKIND <kind>' when the name is another
-- kind's (see queue.lua).
--#queue
local owner, ttl, member = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local now = now_ms()

local wrong = claim(KEYS[8], 'read/write')
if wrong then
  return wrong
end

local exp = tonumber(redis.call('ZSCORE', KEYS[2], owner))
if exp and exp > now then
  redis.call('ZADD', KEYS[2], now + ttl, owner)
  grow(KEYS[2], ttl)
  grow(KEYS[3], ttl)
  mark(KEYS[8], 'read/write', ttl)
  return {1, tonumber(string.match(redis.call('HGET', KEYS[3], owner) or '0', '^%d+'))}
end

local function busy(pttl, wake, holder)
  local timeout = tonumber(ARGV[3])
  if timeout > 0 then
    redis.call('ZADD', KEYS[7], now + timeout, member)
    grow(KEYS[7], timeout)
    mark(KEYS[8], 'read/write', timeout)
  end
  return {0, pttl, wake, holder or ''}
end

local w = redis.call('GET', KEYS[1])
if w then
  return busy(redis.call('PTTL', KEYS[1]), 1, string.match(w, '^[^:]*:%d+:([^%z]*)'))
end
if first(KEYS[5], KEYS[6]) then
  return busy(0, 0)
end

for _, stale in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 2)) do
  redis.call('ZREM', KEYS[2], stale)
  redis.call('HDEL', KEYS[3], stale)
end
local fence = redis.call('INCR', KEYS[4])
local info = string.format('%d', fence)
if ARGV[5] ~= '' then
  info = info .. ':' .. ARGV[5]
end
redis.call('ZADD', KEYS[2], now + ttl, owner)
redis.call('HSET', KEYS[3], owner, info)
redis.call('ZREM', KEYS[7], member)
grow(KEYS[2], ttl)
grow(KEYS[3], ttl)
mark(KEYS[8], 'read/write', ttl)
return {1, fence}
