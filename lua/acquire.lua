-- acquire: take the lease of one resource if it is free, and draw its fence.
-- (queue.lua is inserted at the line '--#queue'.)
-- Go: acquisition.attempt in grant.go.
--
-- KEYS[1]  lease key    <prefix>{<resource>}:lease  "<owner>:<fence>[:<holder>]" with a TTL
-- KEYS[2]  fence key    <prefix>{<t>}:fences        the fence counter of the resource's
--                       hash slot (t hashes to it), never expires
-- KEYS[3]  queue key    <prefix>{<resource>}:queue  (see queue.lua)
-- KEYS[4]  alive key    <prefix>{<resource>}:alive  (see queue.lua)
-- ARGV[1]  owner token (random, unique per logical acquire)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  waiter timeout in ms: when > 0 and the lease is busy, queue the
--          owner (or refresh its place) for that long
-- ARGV[4]  '1' for a fair acquire: a free lease goes to the first live waiter
-- ARGV[5]  '1' if the owner may already be queued (not its first attempt)
-- ARGV[6]  the owner's queue member, '<owner>/<client id>' (see queue.lua)
-- ARGV[7]  the holder's description, '' for none
--
-- When the lease is ours the reply is its fence (> 0), an integer: newly
-- taken (the slot's counter is incremented in the same step, so no lease
-- ever exists without a fence, and every new holder of the resource gets a
-- larger one than every earlier holder), or already ours because an earlier
-- attempt with the same owner succeeded and its reply was lost (then the TTL
-- is reset and the same fence is returned: a retry never creates a second
-- holder or burns a second fence).
-- When it is not, {pttl, first, holder}: pttl is the time the holder's lease
-- has left in ms (-1 if someone stored the key without a TTL, 0 if the lease
-- is free but a fair acquire must let an earlier waiter go first); first is
-- 1 if the owner is now the first live waiter in the queue; holder is the
-- holder's description ('' if none).
local lease, owner, member = KEYS[1], ARGV[1], ARGV[6]
local mine = owner .. ':'
local queued = ARGV[5] == '1'

local function take()
  local fence = redis.call('INCR', KEYS[2])
  local value = mine .. string.format('%d', fence)
  if ARGV[7] ~= '' then
    value = value .. ':' .. ARGV[7]
  end
  redis.call('SET', lease, value, 'PX', ARGV[2])
  return fence
end

-- The common cases first, before the queue's functions are defined (which
-- costs time on every call): the lease is already ours, or free for an owner
-- that need not let a queued waiter go first.
local cur = redis.call('GET', lease)
if cur and string.sub(cur, 1, #mine) == mine then
  redis.call('PEXPIRE', lease, ARGV[2])
  return tonumber(string.match(cur, '^%d+', #mine + 1))
end
if not cur and not queued and ARGV[4] ~= '1' then
  return take()
end

--#queue

local function busy(pttl)
  local timeout = tonumber(ARGV[3])
  if timeout > 0 then
    enqueue(KEYS[3], KEYS[4], member, timeout)
    queued = true
  end
  local head = 0
  if queued and first(KEYS[3], KEYS[4]) == member then
    head = 1
  end
  return {pttl, head, cur and string.match(cur, '^[^:]*:%d+:(.*)$') or ''}
end

if cur then
  return busy(redis.call('PTTL', lease))
end
if ARGV[4] == '1' then
  local head = first(KEYS[3], KEYS[4])
  if head and head ~= member then
    return busy(0)
  end
end
if queued and redis.call('ZREM', KEYS[3], member) == 1 then
  redis.call('HDEL', KEYS[4], member)
end
return take()
