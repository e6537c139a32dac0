-- rw_write: take the write lease: exclusive of readers and other writers.
-- (queue.lua is inserted at the line '--#queue'.)
-- Go: acquisition.attempt in grant.go, shared_lease.go.
--
-- KEYS[1] writer, KEYS[2] readers (see rw_read.lua), KEYS[3] fence,
-- KEYS[4] queue, KEYS[5] alive (the waiting writers, see queue.lua),
-- KEYS[6] lease: the name's kind (see queue.lua)
-- ARGV[1] owner token   ARGV[2] TTL in ms   ARGV[3] waiter timeout in ms (0: do not queue)
-- ARGV[4] '1' for fair   ARGV[5] '1' if the owner may be queued (not, as in
--         acquire.lua, 'not the first attempt': the write lease is checked
--         for being ours on every attempt)
-- ARGV[6] the owner's queue member   ARGV[7] the value's tail (acquire.lua's ARGV[5])
--
-- As acquire.lua, on the writer key, and busy while a reader's lease is
-- unexpired: a waiting writer queues, which stops new readers (see
-- rw_read.lua). Replies as acquire.lua: the fence, or {pttl, first, holder}
-- ({pttl, first, '', 'readers'} while readers hold it); the error reply
-- 'WRONGKIND <kind>' when the name is another kind's (see queue.lua).
--#queue
local lease, owner, member = KEYS[1], ARGV[1], ARGV[6]
local mine = owner .. ':'
local queued = ARGV[5] == '1'

local wrong = claim(KEYS[6], 'read/write')
if wrong then
  return wrong
end

local cur = redis.call('GET', lease)
if cur and string.sub(cur, 1, #mine) == mine then
  redis.call('PEXPIRE', lease, ARGV[2])
  mark(KEYS[6], 'read/write', ARGV[2])
  return tonumber(string.match(cur, '^%d+', #mine + 1))
end

local function busy(pttl, holder)
  local timeout = tonumber(ARGV[3])
  if timeout > 0 then
    enqueue(KEYS[4], KEYS[5], member, timeout)
    mark(KEYS[6], 'read/write', timeout)
    queued = true
  end
  local head = 0
  if queued and first(KEYS[4], KEYS[5]) == member then
    head = 1
  end
  return {pttl, head, holder or ''}
end

if cur then
  return busy(redis.call('PTTL', lease), string.match(cur, '^[^:]*:%d+:([^%z]*)'))
end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) > now_ms() then
  local reply = busy(tonumber(last[2]) - now_ms())
  reply[4] = 'readers'
  return reply
end
if queued or ARGV[4] == '1' then
  local head = first(KEYS[4], KEYS[5])
  if ARGV[4] == '1' and head and head ~= member then
    return busy(0)
  end
end
if queued and redis.call('ZREM', KEYS[4], member) == 1 then
  redis.call('HDEL', KEYS[5], member)
end
local fence = redis.call('INCR', KEYS[3])
local value = mine .. string.format('%d', fence)
if ARGV[7] ~= '' then
  value = value .. ':' .. ARGV[7]
end
redis.call('SET', lease, value, 'PX', ARGV[2])
mark(KEYS[6], 'read/write', ARGV[2])
return fence
