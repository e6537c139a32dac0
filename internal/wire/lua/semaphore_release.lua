-- semaphore_release: compare-and-release of one permit, and wake one
-- waiter. (queue.lua is inserted at '--#queue'.)
-- Go: Lease.releaseCall in shared_lease.go.
--
-- KEYS[1] permits, KEYS[2] holders (see semaphore.lua), KEYS[3] queue, KEYS[4] alive,
-- KEYS[5] lease: the name's kind, free again once no permit is held and
--         nobody waits (see queue.lua)
-- ARGV[1] owner token   ARGV[2] the permit ('' if the owner does not know
--         it: an acquire of unknown outcome giving up; the holders hash says)
-- ARGV[3] wake channel <prefix>{<resource>}:wake   ARGV[4] '1' on Cluster
-- ARGV[5] the owner's queue member if it may be queued, else ''
--
-- Releases the permit only while it is ours and unexpired: its expiry
-- becomes 0, so it is the next one taken, and 'r:'<permit> in the holders
-- hash keeps the released holder until the permit's next release, so that
-- a retried release is recognised even after the permit was taken again.
-- A release of one permit wakes one waiter (which, taking it, wakes the next
-- while a permit is still free: see semaphore.lua). Returns 1 if our permit
-- was released (now or by an earlier call whose reply was lost), else 0.
--#queue
local mine, p = ARGV[1] .. ':', ARGV[2]
if p == '' then
  p = redis.call('HGET', KEYS[2], 'o:' .. ARGV[1]) or ''
end
local released = 0
if p ~= '' then
  local v = redis.call('HGET', KEYS[2], p)
  local exp = tonumber(redis.call('ZSCORE', KEYS[1], p))
  if v and string.sub(v, 1, #mine) == mine and exp then
    if exp > now_ms() then
      redis.call('ZADD', KEYS[1], 'XX', 0, p)
      redis.call('HDEL', KEYS[2], 'o:' .. ARGV[1])
      redis.call('HSET', KEYS[2], 'r:' .. p, v)
      released = 1
    end
  end
  if released == 0 then
    local last = redis.call('HGET', KEYS[2], 'r:' .. p)
    if last and string.sub(last, 1, #mine) == mine then
      released = 2 -- an earlier call released it
    end
  end
end
local left = 0
if ARGV[5] ~= '' then
  left = redis.call('ZREM', KEYS[3], ARGV[5])
  if left == 1 then
    redis.call('HDEL', KEYS[4], ARGV[5])
  end
end
if released == 1 or left == 1 then
  wake(KEYS[3], KEYS[4], ARGV[3], ARGV[4])
end
if released == 1 or left == 1 then
  local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms(), '+inf', 'LIMIT', 0, 1)
  unmark(KEYS[5], 'semaphore', #live > 0, {KEYS[3]})
end
return math.min(released, 1)
